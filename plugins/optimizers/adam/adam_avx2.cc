// The AVX2+FMA+F16C Adam kernel: eight elements per iteration, the same
// operations in the same order as adam_element (adam_update.h), so results
// are bit-identical to the reference loop (the scalar tail IS that loop).
// Compiled for the baseline CPU; only these functions carry a target
// attribute, and adam_cpu.cc calls them only when the CPU has the features.
#include "adam_cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define DSCORE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace dscore::adam {
namespace {

template <dscore_dtype G>
DSCORE_AVX2 inline __m256 load_grad(const void* grad, int64_t i) {
  if constexpr (G == DSCORE_DTYPE_F32) {
    return _mm256_loadu_ps(static_cast<const float*>(grad) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(grad) + i));
    if constexpr (G == DSCORE_DTYPE_BF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      static_assert(G == DSCORE_DTYPE_F16);
      return _mm256_cvtph_ps(h);  // exact, as half_to_float
    }
  }
}

// Eight 32-bit lanes holding 16-bit values (0..0xffff) -> eight uint16.
DSCORE_AVX2 inline __m128i pack_u16(__m256i x) {
  const __m256i packed = _mm256_packus_epi32(x, x);  // per 128-bit lane
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// NaN lanes of p: all ones; else zero.
DSCORE_AVX2 inline __m256i nan_lanes(__m256i bits) {
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  return _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
}

template <dscore_dtype P16>
DSCORE_AVX2 inline void store_copy(void* out, int64_t i, __m256 p) {
  if constexpr (P16 == DSCORE_DTYPE_INVALID) {
    (void)out, (void)i, (void)p;
  } else if constexpr (P16 == DSCORE_DTYPE_F32) {
    _mm256_storeu_ps(static_cast<float*>(out) + i, p);
  } else {
    const __m256i bits = _mm256_castps_si256(p);
    const __m256i nan = nan_lanes(bits);
    __m128i result;
    if constexpr (P16 == DSCORE_DTYPE_BF16) {
      // float_to_bf16: round to nearest even; NaN -> top half | 0x40.
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x0040));
      result = pack_u16(_mm256_blendv_epi8(rounded, quiet, nan));
    } else {
      static_assert(P16 == DSCORE_DTYPE_F16);
      // The hardware rounds to nearest even as float_to_half does; only a
      // NaN's payload differs, so NaN lanes take float_to_half's sign|0x7e00.
      const __m128i h = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i quiet =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000)),
                          _mm256_set1_epi32(0x7e00));
      const __m256i packed_mask = _mm256_permute4x64_epi64(_mm256_packs_epi32(nan, nan), 0x08);
      result = _mm_blendv_epi8(h, pack_u16(quiet), _mm256_castsi256_si128(packed_mask));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i), result);
  }
}

template <dscore_dtype G, dscore_dtype P16, bool kAdamW>
DSCORE_AVX2 void adam_avx2(const AdamConstants& k, const AdamTensor& t, int64_t begin,
                           int64_t end) {
  const __m256 beta1 = _mm256_set1_ps(k.beta1);
  const __m256 beta2 = _mm256_set1_ps(k.beta2);
  const __m256 one_minus_beta1 = _mm256_set1_ps(1.0f - k.beta1);
  const __m256 one_minus_beta2 = _mm256_set1_ps(1.0f - k.beta2);
  const __m256 grad_scale = _mm256_set1_ps(k.grad_scale);
  const __m256 weight_decay = _mm256_set1_ps(k.weight_decay);
  const __m256 bias_correction1 = _mm256_set1_ps(k.bias_correction1);
  const __m256 bias_correction2 = _mm256_set1_ps(k.bias_correction2);
  const __m256 eps = _mm256_set1_ps(k.eps);
  const __m256 neg_lr = _mm256_set1_ps(-k.lr);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 p = _mm256_loadu_ps(t.param + i);
    __m256 m = _mm256_loadu_ps(t.exp_avg + i);
    __m256 v = _mm256_loadu_ps(t.exp_avg_sq + i);
    __m256 g = _mm256_mul_ps(load_grad<G>(t.grad, i), grad_scale);
    if constexpr (!kAdamW) g = _mm256_fmadd_ps(weight_decay, p, g);
    m = _mm256_fmadd_ps(beta1, m, _mm256_mul_ps(one_minus_beta1, g));
    v = _mm256_fmadd_ps(beta2, v, _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(v, bias_correction2)), eps);
    __m256 update = _mm256_div_ps(_mm256_div_ps(m, bias_correction1), denom);
    if constexpr (kAdamW) update = _mm256_fmadd_ps(weight_decay, p, update);
    p = _mm256_fmadd_ps(neg_lr, update, p);
    _mm256_storeu_ps(t.exp_avg + i, m);
    _mm256_storeu_ps(t.exp_avg_sq + i, v);
    _mm256_storeu_ps(t.param + i, p);
    store_copy<P16>(t.param_16bit, i, p);
  }
  adam_update<G, P16>(k, i, end, t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.param_16bit);
}

}  // namespace

void adam_avx2_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end) {
  sdk::with_float_dtype(t.grad_dtype, [&](auto g) {
    sdk::with_output_dtype(t.out16_dtype, [&](auto o) {
      constexpr dscore_dtype G = decltype(g)::value, P16 = decltype(o)::value;
      if (k.adamw)
        adam_avx2<G, P16, true>(k, t, begin, end);
      else
        adam_avx2<G, P16, false>(k, t, begin, end);
    });
  });
}

}  // namespace dscore::adam

#else  // not x86-64: cpu_isa() never answers kAvx2

namespace dscore::adam {
void adam_avx2_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end) {
  sdk::with_float_dtype(t.grad_dtype, [&](auto g) {
    sdk::with_output_dtype(t.out16_dtype, [&](auto o) {
      adam_update<decltype(g)::value, decltype(o)::value>(k, begin, end, t.param, t.grad, t.exp_avg,
                                                          t.exp_avg_sq, t.param_16bit);
    });
  });
}
}  // namespace dscore::adam

#endif
