#include "bf16_round.h"

#include <immintrin.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "parallel.h"
#include "vector_math.h"

namespace dscore::transformer::cpu {
namespace {

// sdk::float_to_bf16 without branches (round to nearest even; a NaN stays
// a quiet NaN), so the compiler vectorises it.
void round_portable(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, sizeof bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded);
  }
}

// The same 16 lanes at a time (the portable loop gets 4 from the baseline
// ISA). Not vcvtneps2bf16: it flushes subnormals, which sdk's rounding keeps.
__attribute__((target("avx512f"))) void round_avx512(uint16_t* out, const float* in, int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  // The maskz forms with every lane set: GCC 12 warns that the unmasked
  // ones read an uninitialised pass-through vector.
  const __mmask16 all = 0xffff;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(in + i);
    const __m512i high = _mm512_maskz_srli_epi32(all, bits, 16);
    const __m512i rounded = _mm512_maskz_srli_epi32(
        all, _mm512_add_epi32(_mm512_add_epi32(bits, bias), _mm512_and_si512(high, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf);
    const __m512i result = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_maskz_cvtepi32_epi16(all, result));
  }
  round_portable(out + i, in + i, n - i);
}

// The same on the CPU's own conversion (avx512_bf16's vcvtneps2bf16: one
// instruction for 16 lanes, rounded to nearest even, a NaN made quiet as
// above), about three times the speed of the integer steps; it flushes a
// subnormal input to zero, so lanes holding one take the integer steps'
// result instead (rare: they are below 1.2e-38).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_avx512_bf16(
    uint16_t* out, const float* in, int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), magnitude = _mm512_set1_epi32(0x7fffffff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    __m256i result = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
    const __m512i bits = _mm512_castps_si512(x);
    const __mmask16 subnormal =
        _mm512_testn_epi32_mask(bits, exponent) & _mm512_test_epi32_mask(bits, magnitude);
    if (subnormal != 0) {
      alignas(32) uint16_t exact[16];
      round_portable(exact, in + i, 16);
      result = _mm256_mask_mov_epi16(result, subnormal,
                                     _mm256_load_si256(reinterpret_cast<const __m256i*>(exact)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), result);
  }
  round_portable(out + i, in + i, n - i);
}

bool cpu_converts_to_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace

void round_to_bf16_serial(uint16_t* out, const float* in, int64_t n) {
  if (vector_isa() == VectorIsa::kAvx512 && cpu_converts_to_bf16()) {
    round_avx512_bf16(out, in, n);
  } else if (vector_isa() == VectorIsa::kAvx512) {
    round_avx512(out, in, n);
  } else {
    round_portable(out, in, n);
  }
}

void round_to_bf16(uint16_t* out, const float* in, int64_t n) {
  for_blocks(n, kElementBlock,
             [&](int64_t i0, int64_t i1) { round_to_bf16_serial(out + i0, in + i0, i1 - i0); });
}

void add_to_bf16(uint16_t* out, const float* in, int64_t n) {
  constexpr int64_t kTile = 1024;  // fp32 sums that stay in L1 between the two loops
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    alignas(64) float sums[kTile];
    for (int64_t t0 = i0; t0 < i1; t0 += kTile) {
      const int64_t m = std::min(kTile, i1 - t0);
      for (int64_t i = 0; i < m; ++i) sums[i] = sdk::bf16_to_float(out[t0 + i]) + in[t0 + i];
      round_to_bf16_serial(out + t0, sums, m);
    }
  });
}

const uint16_t* round_to_bf16(AlignedVector<uint16_t>& buffer, const float* in, int64_t n) {
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  round_to_bf16(buffer.data(), in, n);
  return buffer.data();
}

}  // namespace dscore::transformer::cpu
