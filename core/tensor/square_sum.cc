#include "core/tensor/square_sum.h"

#include <dscore/cpp/dtype.hpp>

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/tensor/dtype_ops.h"

namespace dscore::tensor {

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

namespace {

SquareSum sum_squares_serial(const void* data, dscore_dtype dtype, int64_t n) {
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

// Elements per task: the gradient norm is on every step's path and was
// serial, leaving the other cores idle for ~1-2% of a GPT step.
constexpr int64_t kChunk = int64_t{1} << 18;

}  // namespace

SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n) {
  if (n <= kChunk) return sum_squares_serial(data, dtype, n);
  // Fixed chunks merged in order; the compensated sums make the rounded
  // result independent of the split anyway.
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<SquareSum> parts(static_cast<size_t>(chunks));
  const size_t element = sdk::dtype_size(dtype);
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    parts[static_cast<size_t>(c)] =
        sum_squares_serial(static_cast<const char*>(data) + begin * static_cast<int64_t>(element),
                           dtype, std::min(kChunk, n - begin));
  });
  SquareSum total = parts[0];
  for (size_t c = 1; c < parts.size(); ++c) total.merge(parts[c]);
  total.non_finite = total.non_finite || !std::isfinite(total.hi) || !std::isfinite(total.lo);
  return total;
}

}  // namespace dscore::tensor
