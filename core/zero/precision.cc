#include "core/zero/precision.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace dscore::zero {
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
      fn([](const void* p, int64_t i) { return sdk::bf16_to_float(static_cast<const uint16_t*>(p)[i]); },
         [](void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = sdk::float_to_bf16(v); });
      return;
    case DSCORE_DTYPE_F16:
      fn([](const void* p, int64_t i) { return sdk::half_to_float(static_cast<const uint16_t*>(p)[i]); },
         [](void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = sdk::float_to_half(v); });
      return;
    default:
      throw std::logic_error(std::string("zero::precision: unsupported dtype ") + sdk::dtype_name(dtype));
  }
}

}  // namespace

void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype, int64_t n) {
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sdk::dtype_size(src_dtype));
    return;
  }
  with_float_access(src_dtype, [&](auto load, auto) {
    with_float_access(dst_dtype, [&](auto, auto store) {
      for (int64_t i = 0; i < n; ++i) store(dst, i, load(src, i));
    });
  });
}

void fill_zero(void* data, dscore_dtype dtype, int64_t n) {
  std::memset(data, 0, static_cast<size_t>(n) * sdk::dtype_size(dtype));  // +0 in every float format
}

void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor) {
  if (factor == 1.0) return;
  const float f = static_cast<float>(factor);
  if (dtype == DSCORE_DTYPE_F32) {
    float* p = static_cast<float*>(data);
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
    return;
  }
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
  with_float_access(dtype, [&](auto load, auto store) {
    for (int64_t i = 0; i < n; ++i) store(dst, i, load(dst, i) + load(src, i));
  });
}

void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sdk::dtype_size(dtype));
}

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
      convert(static_cast<const char*>(data) + start * static_cast<int64_t>(sdk::dtype_size(dtype)), dtype,
              block, DSCORE_DTYPE_F32, count);
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
