#include "core/tensor/dtype_ops.h"

#include <dscore/cpp/dtype.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/tensor/bf16_loops.h"

namespace dscore::tensor {
namespace {

// Visit a buffer as float loads/stores by dtype.
template <typename Fn>
void with_float_access(dscore_dtype dtype, Fn&& fn) {
  switch (dtype) {
    case DSCORE_DTYPE_F32:
      fn([](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; },
         [](void* p, int64_t i, float v) { static_cast<float*>(p)[i] = v; });
      return;
    case DSCORE_DTYPE_BF16:
      fn([](const void* p,
            int64_t i) { return sdk::bf16_to_float(static_cast<const uint16_t*>(p)[i]); },
         [](void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = sdk::float_to_bf16(v); });
      return;
    case DSCORE_DTYPE_F16:
      fn([](const void* p,
            int64_t i) { return sdk::half_to_float(static_cast<const uint16_t*>(p)[i]); },
         [](void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = sdk::float_to_half(v); });
      return;
    default:
      throw std::logic_error(std::string("tensor::dtype_ops: unsupported dtype ") +
                             sdk::dtype_name(dtype));
  }
}

}  // namespace

void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype,
             int64_t n) {
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sdk::dtype_size(src_dtype));
    return;
  }
  if (src_dtype == DSCORE_DTYPE_BF16 && dst_dtype == DSCORE_DTYPE_F32)
    return bf16_to_f32(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n,
                       tensor_loops_isa());
  if (src_dtype == DSCORE_DTYPE_F32 && dst_dtype == DSCORE_DTYPE_BF16)
    return f32_to_bf16(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n,
                       tensor_loops_isa());
  with_float_access(src_dtype, [&](auto load, auto) {
    with_float_access(dst_dtype, [&](auto, auto store) {
      for (int64_t i = 0; i < n; ++i) store(dst, i, load(src, i));
    });
  });
}

void fill_zero(void* data, dscore_dtype dtype, int64_t n) {
  std::memset(data, 0,
              static_cast<size_t>(n) * sdk::dtype_size(dtype));  // +0 in every float format
}

void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor) {
  if (factor == 1.0) return;
  const float f = static_cast<float>(factor);
  if (dtype == DSCORE_DTYPE_F32) {
    float* p = static_cast<float*>(data);
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
    return;
  }
  if (dtype == DSCORE_DTYPE_BF16)
    return bf16_scale(static_cast<uint16_t*>(data), n, f, tensor_loops_isa());
  with_float_access(dtype, [&](auto load, auto store) {
    for (int64_t i = 0; i < n; ++i) store(data, i, load(data, i) * f);
  });
}

void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  if (dtype == DSCORE_DTYPE_F32) {
    float* d = static_cast<float*>(dst);
    const float* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    return;
  }
  if (dtype == DSCORE_DTYPE_BF16)
    return bf16_accumulate(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n,
                           tensor_loops_isa());
  with_float_access(dtype, [&](auto load, auto store) {
    for (int64_t i = 0; i < n; ++i) store(dst, i, load(dst, i) + load(src, i));
  });
}

void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sdk::dtype_size(dtype));
}

}  // namespace dscore::tensor
