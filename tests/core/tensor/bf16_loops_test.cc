// The vectorised bf16 loops give sdk::float_to_bf16 / bf16_to_float's bits
// element by element, on every ISA this CPU has: every bf16 pattern,
// rounding ties, NaNs (made quiet), infinities, overflow, subnormals, and
// lengths that leave a tail after the vector lanes.
#include "core/tensor/bf16_loops.h"

#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

namespace dscore::tensor {
namespace {

std::vector<sdk::CpuIsa> isas_here() {
  std::vector<sdk::CpuIsa> isas;
  for (sdk::CpuIsa isa : {sdk::CpuIsa::kScalar, sdk::CpuIsa::kAvx2, sdk::CpuIsa::kAvx512})
    if (isa <= tensor_loops_isa()) isas.push_back(isa);
  return isas;
}

// Every bf16 pattern, then a tail of 7 that no vector width divides.
std::vector<uint16_t> every_pattern() {
  std::vector<uint16_t> v(65536 + 7);
  std::iota(v.begin(), v.begin() + 65536, uint16_t{0});
  for (size_t i = 65536; i < v.size(); ++i) v[i] = static_cast<uint16_t>(0x3f80 + i);
  return v;
}

// fp32 patterns: random bits, then the edges of the rounding.
std::vector<float> float_patterns() {
  std::mt19937 rng(7);
  std::vector<uint32_t> bits(200003);
  for (auto& b : bits) b = rng();
  const uint32_t edges[] = {
      0x3f808000u,                            // a tie, kept part even: stays
      0x3f818000u,                            // a tie, kept part odd: up
      0x3f807fffu, 0x3f808001u, 0x7f7fffffu,  // the largest finite: to infinity
      0xff7fffffu, 0x7f800000u, 0xff800000u,  // infinities
      0x7f800001u, 0xffc00001u, 0x7fbfffffu,  // NaNs, signalling and quiet
      0x00000001u, 0x807fffffu, 0x00008000u,  // subnormals
      0x00000000u, 0x80000000u};
  for (size_t i = 0; i < std::size(edges); ++i) bits[i * 997] = edges[i];
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::bit_cast<float>(bits[i]);
  return v;
}

bool is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

// Equal bits; where both addends are NaN, which one's payload the sum keeps
// is the compiler's choice (addition commutes), so any NaN is right.
void expect_sums(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                 const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const char* isa) {
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = is_nan(a[i]) && is_nan(b[i]) ? is_nan(got[i]) : got[i] == want[i];
    if (!ok && ++wrong <= 5)
      ADD_FAILURE() << isa << ": " << std::hex << a[i] << " + " << b[i] << " gave " << got[i]
                    << ", not " << want[i];
  }
  EXPECT_EQ(wrong, 0) << isa;
}

TEST(Bf16Loops, AccumulateIsTheScalarSumRoundedOnce) {
  const std::vector<uint16_t> src = every_pattern();
  std::vector<uint16_t> start = every_pattern();
  std::shuffle(start.begin(), start.end(), std::mt19937(3));
  std::vector<uint16_t> want(src.size());
  for (size_t i = 0; i < src.size(); ++i)
    want[i] = sdk::float_to_bf16(sdk::bf16_to_float(start[i]) + sdk::bf16_to_float(src[i]));
  for (sdk::CpuIsa isa : isas_here()) {
    std::vector<uint16_t> dst = start;
    bf16_accumulate(dst.data(), src.data(), static_cast<int64_t>(dst.size()), isa);
    expect_sums(dst, want, start, src, sdk::cpu_isa_name(isa));
  }
}

TEST(Bf16Loops, ScaleIsTheScalarProductRoundedOnce) {
  const std::vector<uint16_t> start = every_pattern();
  for (float factor : {0.5f, 3.0f, 1e-30f, 1e30f, -0.0f}) {
    std::vector<uint16_t> want(start.size());
    for (size_t i = 0; i < start.size(); ++i)
      want[i] = sdk::float_to_bf16(sdk::bf16_to_float(start[i]) * factor);
    for (sdk::CpuIsa isa : isas_here()) {
      std::vector<uint16_t> data = start;
      bf16_scale(data.data(), static_cast<int64_t>(data.size()), factor, isa);
      EXPECT_EQ(data, want) << sdk::cpu_isa_name(isa) << ", factor " << factor;
    }
  }
}

TEST(Bf16Loops, ConversionsAreTheScalarOnes) {
  const std::vector<float> f = float_patterns();
  std::vector<uint16_t> rounded_want(f.size());
  for (size_t i = 0; i < f.size(); ++i) rounded_want[i] = sdk::float_to_bf16(f[i]);
  const std::vector<uint16_t> h = every_pattern();
  std::vector<uint32_t> widened_want(h.size());
  for (size_t i = 0; i < h.size(); ++i)
    widened_want[i] = std::bit_cast<uint32_t>(sdk::bf16_to_float(h[i]));
  for (sdk::CpuIsa isa : isas_here()) {
    std::vector<uint16_t> rounded(f.size());
    f32_to_bf16(rounded.data(), f.data(), static_cast<int64_t>(f.size()), isa);
    EXPECT_EQ(rounded, rounded_want) << sdk::cpu_isa_name(isa);
    std::vector<float> widened(h.size());
    bf16_to_f32(widened.data(), h.data(), static_cast<int64_t>(h.size()), isa);
    std::vector<uint32_t> widened_bits(h.size());
    for (size_t i = 0; i < h.size(); ++i) widened_bits[i] = std::bit_cast<uint32_t>(widened[i]);
    EXPECT_EQ(widened_bits, widened_want) << sdk::cpu_isa_name(isa);
  }
}

TEST(Bf16Loops, TheWidestIsaHereIsTested) {
  // Guards the loops above against testing the scalar path alone on a CPU
  // with vectors (DSCORE_CPU_ISA unset in the test run).
  if (std::getenv("DSCORE_CPU_ISA") != nullptr) GTEST_SKIP() << "DSCORE_CPU_ISA is set";
  const sdk::CpuIsa widest = __builtin_cpu_supports("avx512f") ? sdk::CpuIsa::kAvx512
                             : __builtin_cpu_supports("avx2")  ? sdk::CpuIsa::kAvx2
                                                               : sdk::CpuIsa::kScalar;
  EXPECT_EQ(tensor_loops_isa(), widest);
}

}  // namespace
}  // namespace dscore::tensor
