#include "layernorm_rows.h"

#include <immintrin.h>

#include <cmath>

#include "../../transformer_common/cpu/isa_target.h"
#include "../../transformer_common/cpu/vector_math.h"

namespace dscore::gpt::cpu {
namespace {

// Lanes 0..7 added in a fixed order.
DSCORE_AVX2 inline float lane_sum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

}  // namespace

bool layernorm_rows_vectorized() {
  return transformer::cpu::vector_isa() != transformer::cpu::VectorIsa::kScalar;
}

DSCORE_AVX2 void layernorm_forward_row_avx2(float* out, float* mean, float* rstd, const float* x,
                                            const float* weight, const float* bias, int64_t C,
                                            float eps) {
  const int64_t full = C / 8 * 8;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t c = 0; c < full; c += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + c));
  float sum = lane_sum(acc);
  for (int64_t c = full; c < C; ++c) sum += x[c];
  const float m = sum / static_cast<float>(C);
  const __m256 vm = _mm256_set1_ps(m);
  acc = _mm256_setzero_ps();
  for (int64_t c = 0; c < full; c += 8) {
    const __m256 dx = _mm256_sub_ps(_mm256_loadu_ps(x + c), vm);
    acc = _mm256_fmadd_ps(dx, dx, acc);
  }
  float var = lane_sum(acc);
  for (int64_t c = full; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  var /= static_cast<float>(C);
  const float s = 1.0f / std::sqrt(var + eps);
  const __m256 vs = _mm256_set1_ps(s);
  // Elementwise as the scalar loop: ((x - m) * s) * w + b, no fused multiply-add.
  for (int64_t c = 0; c < full; c += 8) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
    _mm256_storeu_ps(out + c, _mm256_add_ps(_mm256_mul_ps(norm, _mm256_loadu_ps(weight + c)),
                                            _mm256_loadu_ps(bias + c)));
  }
  for (int64_t c = full; c < C; ++c) out[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean = m;
  *rstd = s;
}

DSCORE_AVX2 void layernorm_backward_row_avx2(float* dx, float* dweight, float* dbias,
                                             const float* d, const float* x, const float* weight,
                                             float mean, float rstd, int64_t C) {
  const int64_t full = C / 8 * 8;
  const __m256 vm = _mm256_set1_ps(mean), vs = _mm256_set1_ps(rstd);
  __m256 acc_d = _mm256_setzero_ps(), acc_dn = _mm256_setzero_ps();
  for (int64_t c = 0; c < full; c += 8) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
    const __m256 dnorm = _mm256_mul_ps(_mm256_loadu_ps(weight + c), _mm256_loadu_ps(d + c));
    acc_d = _mm256_add_ps(acc_d, dnorm);
    acc_dn = _mm256_fmadd_ps(dnorm, norm, acc_dn);
  }
  float dnorm_mean = lane_sum(acc_d), dnorm_norm_mean = lane_sum(acc_dn);
  for (int64_t c = full; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = weight[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= static_cast<float>(C);
  dnorm_norm_mean /= static_cast<float>(C);
  const __m256 vdm = _mm256_set1_ps(dnorm_mean), vdnm = _mm256_set1_ps(dnorm_norm_mean);
  for (int64_t c = 0; c < full; c += 8) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
    const __m256 dv = _mm256_loadu_ps(d + c);
    const __m256 dnorm = _mm256_mul_ps(_mm256_loadu_ps(weight + c), dv);
    const __m256 g =
        _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(dnorm, vdm), _mm256_mul_ps(norm, vdnm)), vs);
    _mm256_storeu_ps(dx + c, _mm256_add_ps(_mm256_loadu_ps(dx + c), g));
    _mm256_storeu_ps(dweight + c,
                     _mm256_add_ps(_mm256_loadu_ps(dweight + c), _mm256_mul_ps(norm, dv)));
    _mm256_storeu_ps(dbias + c, _mm256_add_ps(_mm256_loadu_ps(dbias + c), dv));
  }
  for (int64_t c = full; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = weight[c] * d[c];
    dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
    dweight[c] += norm * d[c];
    dbias[c] += d[c];
  }
}

}  // namespace dscore::gpt::cpu
