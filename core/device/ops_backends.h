// The two implementations behind core/device/ops.h, called by its dispatch
// (ops.cc) after the arguments are checked: cpu:: in ops_cpu.cc, cuda:: in
// ops_cuda.cu (declared always, defined only in CUDA builds). Not for use
// outside core/device.
#pragma once

#include <dscore/plugin.h>

#include <cstddef>
#include <cstdint>

#include "core/device/ops.h"

namespace dscore::device::ops {

namespace cpu {
void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype, int64_t n);
void fill_zero(void* data, dscore_dtype dtype, int64_t n);
void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor);
void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n);
void accumulate_into(void* dst, dscore_dtype dst_dtype, const void* src, dscore_dtype src_dtype,
                     int64_t n);
void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n);
void sum_squares(const void* data, dscore_dtype dtype, int64_t n, SquareSumResult* out);
}  // namespace cpu

namespace cuda {
void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype, int64_t n,
             void* stream);
void fill_zero(void* data, dscore_dtype dtype, int64_t n, void* stream);
void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor, void* stream);
void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n, void* stream);
void accumulate_into(void* dst, dscore_dtype dst_dtype, const void* src, dscore_dtype src_dtype,
                     int64_t n, void* stream);
void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n, void* stream);
size_t sum_squares_workspace_bytes();
void sum_squares(const void* data, dscore_dtype dtype, int64_t n, SquareSumResult* out,
                 void* workspace, void* stream);
}  // namespace cuda

}  // namespace dscore::device::ops
