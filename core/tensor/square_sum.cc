#include "core/tensor/square_sum.h"

#include <dscore/cpp/dtype.hpp>

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/tensor/bf16_loops.h"
#include "core/tensor/dtype_ops.h"

namespace dscore::tensor {

namespace {

// TwoSum: s + e == hi + x exactly; e is added into lo. Inlined into the
// lanes below so they vectorise.
__attribute__((always_inline)) inline void two_sum(double& hi, double& lo, double x) {
  const double s = hi + x;
  const double bp = s - hi;
  const double e = (hi - (s - bp)) + (x - bp);
  hi = s;
  lo += e;
}

}  // namespace

void SquareSum::add(double x) { two_sum(hi, lo, x); }

void SquareSum::merge(const SquareSum& other) {
  add(other.hi);
  add(other.lo);
  non_finite = non_finite || other.non_finite;
}

namespace {

// kLanes independent compensated sums, element i into lane i % kLanes, each
// accurate to ~2^-106 relative, so how elements are split between lanes,
// or between ranks, does not change the rounded result. The lanes are
// arrays the compiler turns into vector registers (32 doubles: four
// independent AVX-512 chains, eight AVX2 ones; with 16, each add waited on
// the one before it in its chain, and 10.8M values took 22.6 ms on AVX-512
// against 6.4 with 32); every ISA runs the same lanes in the same order,
// so each gives the same bits. A square of an fp32 value is exact in
// double, so contracting it into a fused multiply-add changes nothing.
constexpr int kLanes = 32;
struct Lanes {
  double hi[kLanes] = {};
  double lo[kLanes] = {};
};

__attribute__((always_inline)) inline void add_squares_generic(Lanes& lanes, const float* values,
                                                               int64_t count) {
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double v = values[i + k];
      two_sum(lanes.hi[k], lanes.lo[k], v * v);
    }
  for (int k = 0; i < count; ++i, ++k) {
    const double v = values[i];
    two_sum(lanes.hi[k], lanes.lo[k], v * v);
  }
}

void add_squares_baseline(Lanes& lanes, const float* values, int64_t count) {
  add_squares_generic(lanes, values, count);
}
__attribute__((target("avx2"))) void add_squares_avx2(Lanes& lanes, const float* values,
                                                      int64_t count) {
  add_squares_generic(lanes, values, count);
}
__attribute__((target("avx512f"))) void add_squares_avx512(Lanes& lanes, const float* values,
                                                           int64_t count) {
  add_squares_generic(lanes, values, count);
}

using AddSquares = void (*)(Lanes&, const float*, int64_t);
AddSquares add_squares_for(sdk::CpuIsa isa) {
  switch (isa) {
    case sdk::CpuIsa::kAvx512:
      return add_squares_avx512;
    case sdk::CpuIsa::kAvx2:
      return add_squares_avx2;
    case sdk::CpuIsa::kScalar:
      break;
  }
  return add_squares_baseline;
}

SquareSum sum_squares_serial(AddSquares add_squares, const void* data, dscore_dtype dtype,
                             int64_t n) {
  Lanes lanes;
  constexpr int64_t kBlock = 1024;  // elements converted to fp32 at a time
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
    add_squares(lanes, values, count);
  }
  SquareSum total;
  for (int k = 0; k < kLanes; ++k) total.merge(SquareSum{lanes.hi[k], lanes.lo[k], false});
  total.non_finite = !std::isfinite(total.hi) || !std::isfinite(total.lo);
  return total;
}

// Elements per task: the gradient norm is on every step's path and was
// serial, leaving the other cores idle for ~1-2% of a GPT step.
constexpr int64_t kChunk = int64_t{1} << 18;

}  // namespace

sdk::CpuIsa square_sum_isa() { return tensor_loops_isa(); }

SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n) {
  return sum_squares(data, dtype, n, square_sum_isa());
}

SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n, sdk::CpuIsa isa) {
  const AddSquares add_squares = add_squares_for(isa);
  if (n <= kChunk) return sum_squares_serial(add_squares, data, dtype, n);
  // Fixed chunks merged in order; the compensated sums make the rounded
  // result independent of the split anyway.
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<SquareSum> parts(static_cast<size_t>(chunks));
  const size_t element = sdk::dtype_size(dtype);
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    parts[static_cast<size_t>(c)] = sum_squares_serial(
        add_squares, static_cast<const char*>(data) + begin * static_cast<int64_t>(element), dtype,
        std::min(kChunk, n - begin));
  });
  SquareSum total = parts[0];
  for (size_t c = 1; c < parts.size(); ++c) total.merge(parts[c]);
  total.non_finite = total.non_finite || !std::isfinite(total.hi) || !std::isfinite(total.lo);
  return total;
}

}  // namespace dscore::tensor
