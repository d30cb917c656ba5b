// The Adam/AdamW element loop: DeepSpeed FusedAdam's per-element math
// (REFERENCE.md 3.2) in fp32, one pass over param, grad, exp_avg, exp_avg_sq
// and the optional 16-bit parameter copy. This is the readable reference
// path; a vectorised path must stay equal to it (issue 7).
#pragma once

#include <dscore/cpp/dtype.hpp>
#include <dscore/plugin.h>

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
  float weight_decay;       // times the group's weight_decay_multiplier
  float bias_correction1;   // 1 - beta1^step, or 1 without bias correction
  float bias_correction2;   // 1 - beta2^step, or 1
  float grad_scale;         // folds loss-scale removal and clipping
  bool adamw;               // decoupled weight decay
};

template <dscore_dtype D>
inline float load_as_float(const void* data, int64_t i) {
  if constexpr (D == DSCORE_DTYPE_F32) {
    return static_cast<const float*>(data)[i];
  } else if constexpr (D == DSCORE_DTYPE_BF16) {
    return sdk::bf16_to_float(static_cast<const uint16_t*>(data)[i]);
  } else {
    static_assert(D == DSCORE_DTYPE_F16);
    return sdk::half_to_float(static_cast<const uint16_t*>(data)[i]);
  }
}

// DSCORE_DTYPE_INVALID = no 16-bit copy.
template <dscore_dtype D>
inline void store_from_float(void* data, int64_t i, float v) {
  if constexpr (D == DSCORE_DTYPE_INVALID) {
    (void)data, (void)i, (void)v;
  } else if constexpr (D == DSCORE_DTYPE_F32) {
    static_cast<float*>(data)[i] = v;
  } else if constexpr (D == DSCORE_DTYPE_BF16) {
    static_cast<uint16_t*>(data)[i] = sdk::float_to_bf16(v);
  } else {
    static_assert(D == DSCORE_DTYPE_F16);
    static_cast<uint16_t*>(data)[i] = sdk::float_to_half(v);
  }
}

// n elements. param, exp_avg, exp_avg_sq: fp32 (n). grad: dtype G (n).
// param_16bit: dtype P16 (n), or unused when P16 is INVALID.
template <dscore_dtype G, dscore_dtype P16>
void adam_update(const AdamConstants& k, int64_t n, float* param, const void* grad,
                 float* exp_avg, float* exp_avg_sq, void* param_16bit) {
  const float one_minus_beta1 = 1.0f - k.beta1;
  const float one_minus_beta2 = 1.0f - k.beta2;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = load_as_float<G>(grad, i) * k.grad_scale;
    if (!k.adamw) g += k.weight_decay * p;  // L2 mode: decay enters the moments
    float m = k.beta1 * exp_avg[i] + one_minus_beta1 * g;
    float v = k.beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    // eps outside the sqrt, after bias-correcting v (FusedAdam).
    float denom = std::sqrt(v / k.bias_correction2) + k.eps;
    float update = (m / k.bias_correction1) / denom;
    if (k.adamw) update += k.weight_decay * p;  // decoupled: uses the pre-update p
    p -= k.lr * update;
    param[i] = p;
    store_from_float<P16>(param_16bit, i, p);
  }
}

}  // namespace dscore::adam
