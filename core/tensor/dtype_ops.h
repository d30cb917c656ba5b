// Bulk operations on flat buffers of any float dtype (fp32, fp16, bf16):
// conversion, zero fill, in-place scaling, accumulation and copy. Arithmetic
// is fp32 for 16-bit data, rounding once per result. Shared by ZeRO (master
// weights, gradient reduction) and checkpoints (dtype conversion on load).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>

namespace dscore::tensor {

// dst[i] = src[i] converted, rounding to nearest even; a memcpy when the
// dtypes match. Throws std::logic_error for a non-float dtype (callers that
// take the dtype from outside check it first: checkpoint convert_values).
void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype, int64_t n);
void fill_zero(void* data, dscore_dtype dtype, int64_t n);
void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor);
// dst += src (same dtype).
void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n);
// dst[i] = src[i] (same dtype), a plain copy.
void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n);

}  // namespace dscore::tensor
