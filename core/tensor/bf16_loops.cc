#include "core/tensor/bf16_loops.h"

#include <immintrin.h>
#include <dscore/cpp/dtype.hpp>

namespace dscore::tensor {
namespace {

// Each ISA's lanes: load bf16 as fp32, store fp32 as bf16 with
// sdk::float_to_bf16's rounding (nearest even; a NaN's top half with the
// quiet bit set). The rounding adds 0x7fff plus the kept part's lowest bit
// to the 32 bits and keeps the top 16, as the scalar form does.
// The maskz forms with every lane set: GCC 12 warns that the unmasked ones
// read an uninitialised pass-through vector.
struct Avx512 {
  static constexpr int kLanes = 16;
  static constexpr __mmask16 kAll = 0xffff;
  using Vec = __m512;
  __attribute__((target("avx512f"))) static Vec load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(
        _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
  }
  __attribute__((target("avx512f"))) static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  __attribute__((target("avx512f"))) static void store(uint16_t* p, Vec v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i low_bit =
        _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_maskz_srli_epi32(
        kAll, _mm512_add_epi32(bits, _mm512_add_epi32(low_bit, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
    const __m512i quiet =
        _mm512_or_si512(_mm512_maskz_srli_epi32(kAll, bits, 16), _mm512_set1_epi32(0x40));
    const __m512i out = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(kAll, out));
  }
  __attribute__((target("avx512f"))) static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  __attribute__((target("avx512f"))) static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  __attribute__((target("avx512f"))) static Vec mul(Vec a, float f) {
    return _mm512_mul_ps(a, _mm512_set1_ps(f));
  }
};

struct Avx2 {
  static constexpr int kLanes = 8;
  using Vec = __m256;
  __attribute__((target("avx2"))) static Vec load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  __attribute__((target("avx2"))) static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  __attribute__((target("avx2"))) static void store(uint16_t* p, Vec v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i low_bit = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(low_bit, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i out = _mm256_blendv_epi8(rounded, quiet, nan);
    // Values below 2^16: the unsigned saturating pack keeps them; its
    // 128-bit halves are put side by side.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  __attribute__((target("avx2"))) static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  __attribute__((target("avx2"))) static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  __attribute__((target("avx2"))) static Vec mul(Vec a, float f) {
    return _mm256_mul_ps(a, _mm256_set1_ps(f));
  }
};

// The vector loops' scalar tails, and the Scalar lane below.
inline float value(uint16_t h) { return sdk::bf16_to_float(h); }
inline float value(float f) { return f; }
inline void put(uint16_t* p, float v) { *p = sdk::float_to_bf16(v); }
inline void put(float* p, float v) { *p = v; }

// One lane, for CPUs without AVX2 (or DSCORE_CPU_ISA=scalar).
struct Scalar {
  static constexpr int kLanes = 1;
  using Vec = float;
  static Vec load(const uint16_t* p) { return value(*p); }
  static Vec load(const float* p) { return *p; }
  static void store(uint16_t* p, Vec v) { put(p, v); }
  static void store(float* p, Vec v) { *p = v; }
  static Vec add(Vec a, Vec b) { return a + b; }
  static Vec mul(Vec a, float f) { return a * f; }
};

// The three loops, written once and expanded inside each ISA's functions
// (a macro, not a template: clang refuses a template without the target
// attribute that passes the ISA's vectors between its helpers).
#define DSCORE_BF16_LOOPS(ISA, TARGET)                                                      \
  TARGET void accumulate_##ISA(uint16_t* dst, const uint16_t* src, int64_t n) {             \
    int64_t i = 0;                                                                          \
    for (; i + ISA::kLanes <= n; i += ISA::kLanes)                                          \
      ISA::store(dst + i, ISA::add(ISA::load(dst + i), ISA::load(src + i)));                \
    for (; i < n; ++i) put(dst + i, value(dst[i]) + value(src[i]));                         \
  }                                                                                         \
  TARGET void scale_##ISA(uint16_t* data, int64_t n, float f) {                             \
    int64_t i = 0;                                                                          \
    for (; i + ISA::kLanes <= n; i += ISA::kLanes)                                          \
      ISA::store(data + i, ISA::mul(ISA::load(data + i), f));                               \
    for (; i < n; ++i) put(data + i, value(data[i]) * f);                                   \
  }                                                                                         \
  template <typename To, typename From>                                                     \
  TARGET void convert_##ISA(To* dst, const From* src, int64_t n) {                          \
    int64_t i = 0;                                                                          \
    for (; i + ISA::kLanes <= n; i += ISA::kLanes) ISA::store(dst + i, ISA::load(src + i)); \
    for (; i < n; ++i) put(dst + i, value(src[i]));                                         \
  }

DSCORE_BF16_LOOPS(Avx512, __attribute__((target("avx512f"))))
DSCORE_BF16_LOOPS(Avx2, __attribute__((target("avx2"))))
DSCORE_BF16_LOOPS(Scalar, )
#undef DSCORE_BF16_LOOPS

template <typename To, typename From>
void convert_for(To* dst, const From* src, int64_t n, sdk::CpuIsa isa) {
  switch (isa) {
    case sdk::CpuIsa::kAvx512:
      return convert_Avx512(dst, src, n);
    case sdk::CpuIsa::kAvx2:
      return convert_Avx2(dst, src, n);
    case sdk::CpuIsa::kScalar:
      break;
  }
  convert_Scalar(dst, src, n);
}

}  // namespace

void bf16_accumulate(uint16_t* dst, const uint16_t* src, int64_t n, sdk::CpuIsa isa) {
  switch (isa) {
    case sdk::CpuIsa::kAvx512:
      return accumulate_Avx512(dst, src, n);
    case sdk::CpuIsa::kAvx2:
      return accumulate_Avx2(dst, src, n);
    case sdk::CpuIsa::kScalar:
      break;
  }
  accumulate_Scalar(dst, src, n);
}

void bf16_scale(uint16_t* data, int64_t n, float factor, sdk::CpuIsa isa) {
  switch (isa) {
    case sdk::CpuIsa::kAvx512:
      return scale_Avx512(data, n, factor);
    case sdk::CpuIsa::kAvx2:
      return scale_Avx2(data, n, factor);
    case sdk::CpuIsa::kScalar:
      break;
  }
  scale_Scalar(data, n, factor);
}

void bf16_to_f32(float* dst, const uint16_t* src, int64_t n, sdk::CpuIsa isa) {
  convert_for(dst, src, n, isa);
}

void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, sdk::CpuIsa isa) {
  convert_for(dst, src, n, isa);
}

sdk::CpuIsa tensor_loops_isa() {
  static const sdk::CpuIsa isa = sdk::detected_cpu_isa("tensor loops");
  return isa;
}

}  // namespace dscore::tensor
