// The CPU backend of core/device/ops.h: the engine's own host functions
// (core/tensor/dtype_ops.h, core/tensor/square_sum.h), called unchanged so a
// host run computes exactly what it computed before the ops existed.
#include <dscore/cpp/optimizer.hpp>

#include "core/device/ops_backends.h"
#include "core/tensor/dtype_ops.h"
#include "core/tensor/square_sum.h"

namespace dscore::device::ops::cpu {

void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype,
             int64_t n) {
  tensor::convert(src, src_dtype, dst, dst_dtype, n);
}

void fill_zero(void* data, dscore_dtype dtype, int64_t n) { tensor::fill_zero(data, dtype, n); }

void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor) {
  tensor::scale_in_place(data, dtype, n, factor);
}

void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  tensor::accumulate(dst, src, dtype, n);
}

void accumulate_into(void* dst, dscore_dtype dst_dtype, const void* src, dscore_dtype src_dtype,
                     int64_t n) {
  if (dst_dtype == src_dtype) return tensor::accumulate(dst, src, dst_dtype, n);
  // Across dtypes (new with the device ops: the engine's host code has no
  // such accumulation): fp32 arithmetic, one rounding, as tensor::accumulate.
  sdk::with_float_dtype(dst_dtype, [&](auto d) {
    sdk::with_float_dtype(src_dtype, [&](auto s) {
      constexpr dscore_dtype D = decltype(d)::value, S = decltype(s)::value;
      for (int64_t i = 0; i < n; ++i)
        sdk::store_from_float<D>(dst, i,
                                 sdk::load_as_float<D>(dst, i) + sdk::load_as_float<S>(src, i));
    });
  });
}

void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  tensor::copy(dst, src, dtype, n);
}

void sum_squares(const void* data, dscore_dtype dtype, int64_t n, SquareSumResult* out) {
  const tensor::SquareSum s = tensor::sum_squares(data, dtype, n);
  *out = SquareSumResult{s.hi, s.lo, s.non_finite ? 1 : 0, 0};
}

}  // namespace dscore::device::ops::cpu
