// Tests of sdk/include/dscore/cpp/dtype.hpp's bf16 rounding and
// ordered_reduce.hpp's reduce_chunks, against reference arithmetic written
// out element by element here.
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/ordered_reduce.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace dscore {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even, by comparing the dropped half with the
// halfway point; NaNs keep their top bits and become quiet.
uint16_t reference_bf16(float f) {
  const uint32_t u = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t high = u >> 16, low = u & 0xffffu;
  const bool up = low > 0x8000u || (low == 0x8000u && (high & 1u));
  return static_cast<uint16_t>(high + (up ? 1u : 0u));
}

TEST(SdkBf16, RoundsToNearestEvenAndKeepsNaNs) {
  const uint32_t cases[] = {
      0x3f800000u,  // 1
      0x3f808000u,  // 1 + half an ulp: a tie, down to the even 1
      0x3f818000u,  // a tie up to the even neighbour
      0x3f808001u,  // just past the tie: up
      0x3f807fffu,  // just below: down
      0x7f7fffffu,  // the largest float rounds to infinity
      0x7f800000u,  // infinity
      0xff800000u,  // -infinity
      0x7f800001u,  // a signalling NaN: quiet, payload's top bits kept
      0xffc12345u,  // a negative quiet NaN
      0x00000001u,  // the smallest subnormal: kept as a subnormal (rounds to 0 here)
      0x00018000u,  // a subnormal tie
      0x80000000u,  // -0
  };
  for (uint32_t u : cases)
    EXPECT_EQ(sdk::float_to_bf16(float_of(u)), reference_bf16(float_of(u))) << std::hex << u;
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const float f = float_of(any(rng));
    ASSERT_EQ(sdk::float_to_bf16(f), reference_bf16(f)) << std::hex << bits_of(f);
  }
}

// Three ranks' chunks across several of reduce_chunks' tiles (and a partial
// last one): every element is ((c0 op c1) op c2) in fp32, rounded once.
TEST(SdkOrderedReduce, ReducesInRankOrderAcrossTiles) {
  const int world = 3;
  const int64_t n = 5000;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(static_cast<size_t>(world * n));
  for (auto& v : values) v = normal(rng);
  std::vector<double> scratch;
  for (dscore_reduce_op op : {DSCORE_REDUCE_SUM, DSCORE_REDUCE_AVG, DSCORE_REDUCE_MAX}) {
    auto combine = [op](float a, float b) {
      return op == DSCORE_REDUCE_MAX ? std::max(a, b) : a + b;
    };
    // fp32
    std::vector<float> out(static_cast<size_t>(n));
    sdk::reduce_chunks(values.data(), world, n, DSCORE_DTYPE_F32, op, out.data(), &scratch);
    for (int64_t i = 0; i < n; ++i) {
      float e = values[static_cast<size_t>(i)];
      for (int r = 1; r < world; ++r) e = combine(e, values[static_cast<size_t>(r * n + i)]);
      if (op == DSCORE_REDUCE_AVG) e /= world;
      ASSERT_EQ(bits_of(out[static_cast<size_t>(i)]), bits_of(e)) << "fp32 op " << op << " " << i;
    }
    // bf16
    std::vector<uint16_t> in16(values.size()), out16(static_cast<size_t>(n));
    for (size_t i = 0; i < values.size(); ++i) in16[i] = reference_bf16(values[i]);
    sdk::reduce_chunks(in16.data(), world, n, DSCORE_DTYPE_BF16, op, out16.data(), &scratch);
    for (int64_t i = 0; i < n; ++i) {
      float e = sdk::bf16_to_float(in16[static_cast<size_t>(i)]);
      for (int r = 1; r < world; ++r)
        e = combine(e, sdk::bf16_to_float(in16[static_cast<size_t>(r * n + i)]));
      if (op == DSCORE_REDUCE_AVG) e /= world;
      ASSERT_EQ(out16[static_cast<size_t>(i)], reference_bf16(e)) << "bf16 op " << op << " " << i;
    }
  }
}

}  // namespace
}  // namespace dscore
