// Bulk operations on flat buffers of any float dtype (fp32, fp16, bf16):
// conversion, in-place scaling, accumulation, and the gradient statistics
// (sum of squares, non-finite check) the boundary step needs. Arithmetic is
// fp32 for 16-bit data, rounding once per result.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>

namespace dscore::zero {

void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype, int64_t n);
void fill_zero(void* data, dscore_dtype dtype, int64_t n);
void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor);
// dst += src (same dtype).
void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n);
// dst[i] = src[i] (same dtype), a plain copy.
void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n);

// A sum of squares kept as an unevaluated pair hi + lo (TwoSum
// compensation), so partial sums over different splits of the same
// elements round to the same double: the norm does not depend on how ZeRO
// partitions the gradient.
struct SquareSum {
  double hi = 0;
  double lo = 0;
  bool non_finite = false;  // an Inf or NaN was seen

  void add(double x);
  void merge(const SquareSum& other);  // also in a fixed (rank) order
  double value() const { return hi + lo; }
};

SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n);

}  // namespace dscore::zero
