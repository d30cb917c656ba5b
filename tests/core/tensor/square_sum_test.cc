// The compensated sum of squares does not depend on how the elements are
// split into parts (what keeps the gradient norm identical across ZeRO
// stages), gives the same bits on every vector ISA, and reports non-finite
// values.
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

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

TEST(SquareSum, EveryIsaGivesTheSameBits) {
  // Lengths with remainders of the 32 lanes, fp32 and bf16, serial and parallel.
  for (size_t n : {size_t{1}, size_t{13}, size_t{50}, size_t{1031}, size_t{300007}}) {
    const std::vector<float> v = random_values(n, static_cast<uint32_t>(n));
    std::vector<uint16_t> bf16(n);
    for (size_t i = 0; i < n; ++i) bf16[i] = sdk::float_to_bf16(v[i]);
    for (auto [data, dtype] : {std::pair<const void*, dscore_dtype>{v.data(), DSCORE_DTYPE_F32},
                               {bf16.data(), DSCORE_DTYPE_BF16}}) {
      const auto count = static_cast<int64_t>(n);
      const SquareSum scalar = sum_squares(data, dtype, count, sdk::CpuIsa::kScalar);
      for (sdk::CpuIsa isa : {sdk::CpuIsa::kAvx2, sdk::CpuIsa::kAvx512}) {
        if (isa > square_sum_isa()) continue;  // not on this CPU
        const SquareSum s = sum_squares(data, dtype, count, isa);
        EXPECT_EQ(std::bit_cast<uint64_t>(s.hi), std::bit_cast<uint64_t>(scalar.hi))
            << sdk::cpu_isa_name(isa) << ", n " << n << ", dtype " << dtype;
        EXPECT_EQ(std::bit_cast<uint64_t>(s.lo), std::bit_cast<uint64_t>(scalar.lo))
            << sdk::cpu_isa_name(isa) << ", n " << n << ", dtype " << dtype;
      }
    }
  }
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
