// The LAMB step of one tensor (docs/deepspeed-reference.md#fusedlamb), the
// readable reference path, and the shape of its two norm reductions, which
// the CUDA kernels (lamb_cuda.cu) follow exactly so both paths give the same
// bits:
//
//   the tensor is cut into chunks of kNormChunk elements (one CUDA block
//   each); in a chunk, element i goes to lane (i / 4) % kNormLanes (one CUDA
//   thread: groups of 4 for 16-byte loads), each lane sums its elements'
//   squares in double in increasing i, the lanes are merged by a halving
//   tree (lane t += lane t + s for s = kNormLanes / 2 ... 1), and the chunk
//   sums are added in chunk order.
//
// The squares of fp32 values are exact in double; every addition is one
// IEEE double rounding on both sides, and every fp32 operation below is one
// rounding with no fused multiply-add (-ffp-contract=off on the CPU, __f*_rn
// and --fmad=false on the GPU).
#pragma once

#include <dscore/plugin.h>
#include <dscore/cpp/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dscore::lamb {

constexpr int64_t kNormChunk = 65536;
constexpr int kNormLanes = 512;
constexpr int kNormGroup = 4;

// Per-call constants, in the precision the kernels compute in.
struct LambConstants {
  float beta1, beta2, eps, weight_decay, grad_scale;
  float step_size;  // lr, times sqrt(1 - beta2^t) / (1 - beta1^t) with bias correction
  double min_coeff, max_coeff;
  bool eps_inside_sqrt;
};

// One LAMB tensor, as the step receives it (pointers in one memory).
struct LambTensor {
  float* param;
  const void* grad;
  float* exp_avg;
  float* exp_avg_sq;
  void* param_16bit;  // NULL: no 16-bit copy
  int64_t numel;
  dscore_dtype grad_dtype;
  dscore_dtype out16_dtype;  // DSCORE_DTYPE_INVALID without a copy
};

// u = m / (sqrt(v) + eps) + wd p (eps inside the sqrt when asked).
inline float lamb_update(const LambConstants& k, float p, float m, float v) {
  const float denom = k.eps_inside_sqrt ? std::sqrt(v + k.eps) : std::sqrt(v) + k.eps;
  return m / denom + k.weight_decay * p;
}

// The moments of one element, in place.
inline void lamb_moments(const LambConstants& k, float g_raw, float& m, float& v) {
  const float g = g_raw * k.grad_scale;
  m = k.beta1 * m + (1.0f - k.beta1) * g;
  v = k.beta2 * v + ((1.0f - k.beta2) * g) * g;
}

// The trust-ratio-scaled step from the two squared norms (double), with
// DeepSpeed's rules: ratio 1 when either norm is 0, then the clamp.
inline float lamb_scaled_step(const LambConstants& k, double w_norm_sq, double u_norm_sq) {
  double ratio = 1.0;
  if (w_norm_sq != 0 && u_norm_sq != 0) ratio = std::sqrt(w_norm_sq) / std::sqrt(u_norm_sq);
  ratio = std::clamp(ratio, k.min_coeff, k.max_coeff);
  return static_cast<float>(static_cast<double>(k.step_size) * ratio);
}

// Pass 1 over one chunk (n <= kNormChunk elements from `begin`): writes the
// moments, returns the chunk's |p|^2 and |u|^2 in the shape above.
template <dscore_dtype G>
void lamb_chunk_moments(const LambConstants& k, const LambTensor& t, int64_t begin, int64_t n,
                        double* w_sq, double* u_sq) {
  double w[kNormLanes] = {}, u[kNormLanes] = {};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = begin + i;
    const int lane = static_cast<int>((i / kNormGroup) % kNormLanes);
    float m = t.exp_avg[e], v = t.exp_avg_sq[e];
    lamb_moments(k, sdk::load_as_float<G>(t.grad, e), m, v);
    t.exp_avg[e] = m;
    t.exp_avg_sq[e] = v;
    const double p = t.param[e];
    const double upd = lamb_update(k, t.param[e], m, v);
    w[lane] += p * p;
    u[lane] += upd * upd;
  }
  for (int s = kNormLanes / 2; s > 0; s /= 2)
    for (int lane = 0; lane < s; ++lane) {
      w[lane] += w[lane + s];
      u[lane] += u[lane + s];
    }
  *w_sq = w[0];
  *u_sq = u[0];
}

// The whole step of one tensor on the CPU: pass 1 (moments, norms), the
// trust ratio, pass 2 (u again from the stored moments and the untouched p,
// then the update and the 16-bit copy).
template <dscore_dtype G, dscore_dtype P16>
void lamb_tensor_cpu(const LambConstants& k, const LambTensor& t) {
  double w_norm_sq = 0, u_norm_sq = 0;
  for (int64_t begin = 0; begin < t.numel; begin += kNormChunk) {
    double w = 0, u = 0;
    lamb_chunk_moments<G>(k, t, begin, std::min(kNormChunk, t.numel - begin), &w, &u);
    w_norm_sq += w;
    u_norm_sq += u;
  }
  const float scaled_step = lamb_scaled_step(k, w_norm_sq, u_norm_sq);
  for (int64_t i = 0; i < t.numel; ++i) {
    const float p =
        t.param[i] - scaled_step * lamb_update(k, t.param[i], t.exp_avg[i], t.exp_avg_sq[i]);
    t.param[i] = p;
    sdk::store_from_float<P16>(t.param_16bit, i, p);
  }
}

}  // namespace dscore::lamb
