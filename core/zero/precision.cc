#include "core/zero/precision.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>

#include "core/tensor/dtype_ops.h"

namespace dscore::zero {

void SquareSum::add(double x) {
  // TwoSum: s + e == hi + x exactly.
  const double s = hi + x;
  const double bp = s - hi;
  const double e = (hi - (s - bp)) + (x - bp);
  hi = s;
  lo += e;
}

void SquareSum::merge(const SquareSum& other) {
  add(other.hi);
  add(other.lo);
  non_finite = non_finite || other.non_finite;
}

SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n) {
  // Four independent compensated sums (the CPU overlaps their dependency
  // chains) over blocks converted to fp32; each is accurate to ~2^-106
  // relative, so how elements are split between sums, or between ranks,
  // does not change the rounded result.
  SquareSum lanes[4];
  constexpr int64_t kBlock = 1024;
  float block[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t count = std::min(kBlock, n - start);
    const float* values;
    if (dtype == DSCORE_DTYPE_F32) {
      values = static_cast<const float*>(data) + start;
    } else {
      tensor::convert(
          static_cast<const char*>(data) + start * static_cast<int64_t>(sdk::dtype_size(dtype)),
          dtype, block, DSCORE_DTYPE_F32, count);
      values = block;
    }
    int64_t i = 0;
    for (; i + 4 <= count; i += 4) {
      // The square of an fp32 value is exact in double.
      for (int k = 0; k < 4; ++k) {
        const double v = values[i + k];
        lanes[k].add(v * v);
      }
    }
    for (; i < count; ++i) {
      const double v = values[i];
      lanes[0].add(v * v);
    }
  }
  SquareSum total = lanes[0];
  for (int k = 1; k < 4; ++k) total.merge(lanes[k]);
  total.non_finite = !std::isfinite(total.hi) || !std::isfinite(total.lo);
  return total;
}

}  // namespace dscore::zero
