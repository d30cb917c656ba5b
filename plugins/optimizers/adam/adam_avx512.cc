// The AVX-512F Adam kernel: sixteen elements per iteration, the same
// operations in the same order as adam_element (adam_update.h) and the AVX2
// kernel (adam_avx2.cc), so results are bit-identical to both: every step is
// a correctly rounded IEEE operation (mul, fma, div, sqrt, add) or exact
// integer work, and the width does not change any element's result. The
// tail (fewer than 16 elements) IS the reference loop, as in the AVX2 kernel.
// Needs only AVX-512F (not BW/VL): 16-bit lanes are widened to 32 bits
// and narrowed with vpmovdw. Compiled for the baseline CPU; only these
// functions carry a target attribute, and adam_cpu.cc calls them only when
// the CPU has the features.
#include "adam_cpu.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics (_mm512_sqrt_ps, _mm512_cvtph_ps) pass
// _mm512_undefined_ps(), a self-initialised variable, as the unused masked
// source, and -Wmaybe-uninitialized flags it once inlined: a false alarm.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define DSCORE_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace dscore::adam {
namespace {

template <dscore_dtype G>
DSCORE_AVX512 inline __m512 load_grad(const void* grad, int64_t i) {
  if constexpr (G == DSCORE_DTYPE_F32) {
    return _mm512_loadu_ps(static_cast<const float*>(grad) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(grad) + i));
    if constexpr (G == DSCORE_DTYPE_BF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      static_assert(G == DSCORE_DTYPE_F16);
      return _mm512_cvtph_ps(h);  // exact, as half_to_float
    }
  }
}

// NaN lanes of p.
DSCORE_AVX512 inline __mmask16 nan_lanes(__m512i bits) {
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  return _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
}

template <dscore_dtype P16>
DSCORE_AVX512 inline void store_copy(void* out, int64_t i, __m512 p) {
  if constexpr (P16 == DSCORE_DTYPE_INVALID) {
    (void)out, (void)i, (void)p;
  } else if constexpr (P16 == DSCORE_DTYPE_F32) {
    _mm512_storeu_ps(static_cast<float*>(out) + i, p);
  } else {
    const __m512i bits = _mm512_castps_si512(p);
    const __mmask16 nan = nan_lanes(bits);
    __m512i wide;  // sixteen 16-bit results in 32-bit lanes
    if constexpr (P16 == DSCORE_DTYPE_BF16) {
      // float_to_bf16: round to nearest even; NaN -> top half | 0x40.
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      const __m512i rounded = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
      const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
      wide = _mm512_mask_blend_epi32(nan, rounded, quiet);
    } else {
      static_assert(P16 == DSCORE_DTYPE_F16);
      // The hardware rounds to nearest even as float_to_half does; only a
      // NaN's payload differs, so NaN lanes take float_to_half's sign|0x7e00.
      const __m256i h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i quiet =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000)),
                          _mm512_set1_epi32(0x7e00));
      wide = _mm512_mask_blend_epi32(nan, _mm512_cvtepu16_epi32(h), quiet);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + i),
                        _mm512_cvtepi32_epi16(wide));  // values fit: plain truncation
  }
}

template <dscore_dtype G, dscore_dtype P16, bool kAdamW>
DSCORE_AVX512 void adam_avx512(const AdamConstants& k, const AdamTensor& t, int64_t begin,
                               int64_t end) {
  const __m512 beta1 = _mm512_set1_ps(k.beta1);
  const __m512 beta2 = _mm512_set1_ps(k.beta2);
  const __m512 one_minus_beta1 = _mm512_set1_ps(1.0f - k.beta1);
  const __m512 one_minus_beta2 = _mm512_set1_ps(1.0f - k.beta2);
  const __m512 grad_scale = _mm512_set1_ps(k.grad_scale);
  const __m512 weight_decay = _mm512_set1_ps(k.weight_decay);
  const __m512 bias_correction1 = _mm512_set1_ps(k.bias_correction1);
  const __m512 bias_correction2 = _mm512_set1_ps(k.bias_correction2);
  const __m512 eps = _mm512_set1_ps(k.eps);
  const __m512 neg_lr = _mm512_set1_ps(-k.lr);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 p = _mm512_loadu_ps(t.param + i);
    __m512 m = _mm512_loadu_ps(t.exp_avg + i);
    __m512 v = _mm512_loadu_ps(t.exp_avg_sq + i);
    __m512 g = _mm512_mul_ps(load_grad<G>(t.grad, i), grad_scale);
    if constexpr (!kAdamW) g = _mm512_fmadd_ps(weight_decay, p, g);
    m = _mm512_fmadd_ps(beta1, m, _mm512_mul_ps(one_minus_beta1, g));
    v = _mm512_fmadd_ps(beta2, v, _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(v, bias_correction2)), eps);
    __m512 update = _mm512_div_ps(_mm512_div_ps(m, bias_correction1), denom);
    if constexpr (kAdamW) update = _mm512_fmadd_ps(weight_decay, p, update);
    p = _mm512_fmadd_ps(neg_lr, update, p);
    _mm512_storeu_ps(t.exp_avg + i, m);
    _mm512_storeu_ps(t.exp_avg_sq + i, v);
    _mm512_storeu_ps(t.param + i, p);
    store_copy<P16>(t.param_16bit, i, p);
  }
  adam_update<G, P16>(k, i, end, t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.param_16bit);
}

}  // namespace

void adam_avx512_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end) {
  sdk::with_float_dtype(t.grad_dtype, [&](auto g) {
    sdk::with_output_dtype(t.out16_dtype, [&](auto o) {
      constexpr dscore_dtype G = decltype(g)::value, P16 = decltype(o)::value;
      if (k.adamw)
        adam_avx512<G, P16, true>(k, t, begin, end);
      else
        adam_avx512<G, P16, false>(k, t, begin, end);
    });
  });
}

}  // namespace dscore::adam

#else  // not x86-64: cpu_isa() never answers kAvx512

namespace dscore::adam {
void adam_avx512_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end) {
  sdk::with_float_dtype(t.grad_dtype, [&](auto g) {
    sdk::with_output_dtype(t.out16_dtype, [&](auto o) {
      adam_update<decltype(g)::value, decltype(o)::value>(k, begin, end, t.param, t.grad, t.exp_avg,
                                                          t.exp_avg_sq, t.param_16bit);
    });
  });
}
}  // namespace dscore::adam

#endif
