// The compensated sum of squares does not depend on how the elements are
// split into parts (what keeps the gradient norm identical across ZeRO
// stages), and reports non-finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/tensor/square_sum.h"

namespace dscore::tensor {
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
  const double whole =
      sum_squares(v.data(), DSCORE_DTYPE_F32, static_cast<int64_t>(v.size())).value();
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

TEST(SquareSum, LargeInputsSummedInParallelGiveTheSameDoubleAndSeeEveryChunk) {
  // Above 2^18 elements the sum runs in parallel chunks.
  std::vector<float> v = random_values(600001, 11);
  const double whole =
      sum_squares(v.data(), DSCORE_DTYPE_F32, static_cast<int64_t>(v.size())).value();
  SquareSum halves = sum_squares(v.data(), DSCORE_DTYPE_F32, 300000);
  halves.merge(sum_squares(v.data() + 300000, DSCORE_DTYPE_F32, 300001));
  EXPECT_EQ(halves.value(), whole);
  double naive = 0;
  for (float x : v) naive += static_cast<double>(x) * x;
  EXPECT_NEAR(whole, naive, 1e-12 * naive);
  v[550000] = NAN;  // in the last chunk
  EXPECT_TRUE(sum_squares(v.data(), DSCORE_DTYPE_F32, static_cast<int64_t>(v.size())).non_finite);
}

TEST(SquareSum, NonFiniteIsReported) {
  std::vector<float> v = {1, 2, INFINITY, 3};
  EXPECT_TRUE(sum_squares(v.data(), DSCORE_DTYPE_F32, 4).non_finite);
  v[2] = NAN;
  EXPECT_TRUE(sum_squares(v.data(), DSCORE_DTYPE_F32, 4).non_finite);
  v[2] = 0;
  EXPECT_FALSE(sum_squares(v.data(), DSCORE_DTYPE_F32, 4).non_finite);
}

}  // namespace
}  // namespace dscore::tensor
