// The Adam/AdamW element update (shared by the adam plugin and muon's Adam
// half): DeepSpeed FusedAdam's per-element math
// (docs/deepspeed-reference.md#fusedadam) in fp32, one pass over param, grad, exp_avg, exp_avg_sq
// and the optional 16-bit parameter copy. This is the readable reference
// path. The vectorised path (adam_avx2.cc) and the CUDA kernel
// (adam_cuda.cu) perform the SAME operations in the same order, fused
// exactly where this file calls std::fma, so all three agree bit for bit
// (the sources are compiled with -ffp-contract=off so no compiler fuses more).
#pragma once

#include <dscore/plugin.h>
#include <dscore/cpp/optimizer.hpp>

#include <cmath>
#include <cstdint>

namespace dscore::adam {

// Per-call constants, already in the precision the kernel computes in (fp32,
// as FusedAdam's kernel receives them).
struct AdamConstants {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;      // times the group's weight_decay_multiplier
  float bias_correction1;  // 1 - beta1^step, or 1 without bias correction
  float bias_correction2;  // 1 - beta2^step, or 1
  float grad_scale;        // folds loss-scale removal and clipping
  bool adamw;              // decoupled weight decay
};

// One element: g is the gradient as stored (converted to fp32), p, m, v are
// read and written. Returns nothing; the caller stores p/m/v.
inline void adam_element(const AdamConstants& k, float g_raw, float& p, float& m, float& v) {
  const float one_minus_beta1 = 1.0f - k.beta1;
  const float one_minus_beta2 = 1.0f - k.beta2;
  float g = g_raw * k.grad_scale;
  if (!k.adamw) g = std::fma(k.weight_decay, p, g);  // L2 mode: decay enters the moments
  m = std::fma(k.beta1, m, one_minus_beta1 * g);
  v = std::fma(k.beta2, v, (one_minus_beta2 * g) * g);
  // eps outside the sqrt, after bias-correcting v (FusedAdam).
  const float denom = std::sqrt(v / k.bias_correction2) + k.eps;
  float update = (m / k.bias_correction1) / denom;
  if (k.adamw) update = std::fma(k.weight_decay, p, update);  // decoupled: the pre-update p
  p = std::fma(-k.lr, update, p);
}

// Elements [begin, end). param, exp_avg, exp_avg_sq: fp32. grad: dtype G.
// param_16bit: dtype P16, or unused when P16 is INVALID.
template <dscore_dtype G, dscore_dtype P16>
void adam_update(const AdamConstants& k, int64_t begin, int64_t end, float* param, const void* grad,
                 float* exp_avg, float* exp_avg_sq, void* param_16bit) {
  for (int64_t i = begin; i < end; ++i) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    adam_element(k, sdk::load_as_float<G>(grad, i), p, m, v);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p;
    sdk::store_from_float<P16>(param_16bit, i, p);
  }
}

}  // namespace dscore::adam
