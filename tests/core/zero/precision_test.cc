// Buffer precision helpers: conversions round once, and the compensated
// sum of squares does not depend on how the elements are split into parts
// (what keeps the gradient norm identical across ZeRO stages).
#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <random>

#include "core/zero/precision.h"

namespace dscore::zero {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(SquareSum, SplitsOfTheSameElementsGiveTheSameDouble) {
  std::vector<float> v = random_values(100003, 7);
  const double whole = sum_squares(v.data(), DSCORE_DTYPE_F32, static_cast<int64_t>(v.size())).value();
  for (size_t parts : {2u, 3u, 4u, 7u, 64u}) {
    SquareSum total;
    const size_t chunk = (v.size() + parts - 1) / parts;
    for (size_t start = 0; start < v.size(); start += chunk) {
      const size_t n = std::min(chunk, v.size() - start);
      total.merge(sum_squares(v.data() + start, DSCORE_DTYPE_F32, static_cast<int64_t>(n)));
    }
    EXPECT_EQ(total.value(), whole) << parts << " parts";
  }
  double naive = 0;
  for (float x : v) naive += static_cast<double>(x) * x;
  EXPECT_NEAR(whole, naive, 1e-12 * naive);
}

TEST(SquareSum, NonFiniteIsReported) {
  std::vector<float> v = {1, 2, INFINITY, 3};
  EXPECT_TRUE(sum_squares(v.data(), DSCORE_DTYPE_F32, 4).non_finite);
  v[2] = NAN;
  EXPECT_TRUE(sum_squares(v.data(), DSCORE_DTYPE_F32, 4).non_finite);
  v[2] = 0;
  EXPECT_FALSE(sum_squares(v.data(), DSCORE_DTYPE_F32, 4).non_finite);
}

TEST(Precision, ConvertRoundsToNearestAndAccumulateComputesInFp32) {
  std::vector<float> v = {1.0f, 1.0f + 1.0f / 256, -2.5f, 65504.0f};
  std::vector<uint16_t> bf(4), back_bf(4);
  convert(v.data(), DSCORE_DTYPE_F32, bf.data(), DSCORE_DTYPE_BF16, 4);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(bf[i], sdk::float_to_bf16(v[i]));
  std::vector<uint16_t> h(4);
  convert(v.data(), DSCORE_DTYPE_F32, h.data(), DSCORE_DTYPE_F16, 4);
  std::vector<float> round_trip(4);
  convert(h.data(), DSCORE_DTYPE_F16, round_trip.data(), DSCORE_DTYPE_F32, 4);
  EXPECT_EQ(round_trip[3], 65504.0f);
  accumulate(bf.data(), bf.data(), DSCORE_DTYPE_BF16, 4);  // x + x = 2x exactly
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(sdk::bf16_to_float(bf[i]), 2 * sdk::bf16_to_float(sdk::float_to_bf16(v[i])));
  scale_in_place(v.data(), DSCORE_DTYPE_F32, 4, 0.5);
  EXPECT_EQ(v[2], -1.25f);
}

}  // namespace
}  // namespace dscore::zero
