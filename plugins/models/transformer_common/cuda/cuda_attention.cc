// Causal self-attention of the CUDA backend (cuda_backend.h), one sample at
// a time: the NH heads' scores by one strided-batched GEMM into fp32
// scratch, the causal softmax into att (B, NH, T, T), kept by the runner as
// this backend's attention state (the CPU backend's kernel is tiled instead),
// then att V. Backward mirrors it: dP = dY V^T, dV = P^T dY, the softmax
// gradient, dQ = scale dS K, dK = scale dS^T Q. qkv rows are [q | k | v] of
// 3C channels; head h owns channels h*hs .. (h+1)*hs of each.
#include <cmath>

#include "cuda_backend.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"

namespace dscore::gpt::gpu {

template <typename S>
void CudaBackend<S>::attention_forward(S* out, S* att, const S* qkv, int64_t B, int64_t Tn,
                                       int64_t C, int64_t NH) {
  const int64_t hs = C / NH, ld = 3 * C, TT = Tn * Tn;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  auto* scores = static_cast<float*>(
      context_->scratch(Scratch::kScores, static_cast<size_t>(NH * TT) * sizeof(float)));
  for (int64_t b = 0; b < B; ++b) {
    const S* q = qkv + b * Tn * ld;
    const S* k = q + C;
    const S* v = q + 2 * C;
    S* p = att + b * NH * TT;
    // scores[h] (T, T) row-major = scale Q_h K_h^T: cuBLAS (T x T) = K_h (op T) Q_h^T.
    gemm(*context_, Op::kT, Op::kN, Tn, Tn, hs, scale, k, ld, q, ld, 0.0f, scores, Tn, NH, hs, hs,
         TT);
    DSCORE_GPT_CUDA_CHECK(causal_softmax_forward(p, scores, NH * Tn, Tn, context_->stream()));
    // out_h (T, hs) row-major, row stride C = P_h V_h: cuBLAS (hs x T) = V_h^T P_h^T.
    gemm(*context_, Op::kN, Op::kN, hs, Tn, Tn, 1.0f, v, ld, p, Tn, 0.0f, out + b * Tn * C, C, NH,
         hs, TT, hs);
  }
}

template <typename S>
void CudaBackend<S>::attention_backward(S* dqkv, const S* dout, const S* qkv, const S* /*out*/,
                                        const S* att, int64_t B, int64_t Tn, int64_t C,
                                        int64_t NH) {
  const int64_t hs = C / NH, ld = 3 * C, TT = Tn * Tn;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  auto* datt = static_cast<float*>(
      context_->scratch(Scratch::kScores, static_cast<size_t>(NH * TT) * sizeof(float)));
  auto* ds = static_cast<S*>(
      context_->scratch(Scratch::kAttentionGrad, static_cast<size_t>(NH * TT) * sizeof(S)));
  for (int64_t b = 0; b < B; ++b) {
    const S* q = qkv + b * Tn * ld;
    const S* k = q + C;
    const S* v = q + 2 * C;
    S* dq = dqkv + b * Tn * ld;
    S* dk = dq + C;
    S* dv = dq + 2 * C;
    const S* dy = dout + b * Tn * C;
    const S* p = att + b * NH * TT;
    // dP_h (T, T) = dY_h V_h^T: cuBLAS (T x T) = V_h (op T) dY_h^T.
    gemm(*context_, Op::kT, Op::kN, Tn, Tn, hs, 1.0f, v, ld, dy, C, 0.0f, datt, Tn, NH, hs, hs, TT);
    // dV_h (T, hs) = P_h^T dY_h: cuBLAS (hs x T) = dY_h^T P_h (op T).
    gemm(*context_, Op::kN, Op::kT, hs, Tn, Tn, 1.0f, dy, C, p, Tn, 0.0f, dv, ld, NH, hs, TT, hs);
    DSCORE_GPT_CUDA_CHECK(causal_softmax_backward(ds, p, datt, NH * Tn, Tn, context_->stream()));
    // dQ_h = scale dS_h K_h: cuBLAS (hs x T) = K_h^T dS_h^T.
    gemm(*context_, Op::kN, Op::kN, hs, Tn, Tn, scale, k, ld, ds, Tn, 0.0f, dq, ld, NH, hs, TT, hs);
    // dK_h = scale dS_h^T Q_h: cuBLAS (hs x T) = Q_h^T dS_h (op T).
    gemm(*context_, Op::kN, Op::kT, hs, Tn, Tn, scale, q, ld, ds, Tn, 0.0f, dk, ld, NH, hs, TT, hs);
  }
}

#define DSCORE_GPT_INSTANTIATE(S)                                                              \
  template void CudaBackend<S>::attention_forward(S*, S*, const S*, int64_t, int64_t, int64_t, \
                                                  int64_t);                                    \
  template void CudaBackend<S>::attention_backward(S*, const S*, const S*, const S*, const S*, \
                                                   int64_t, int64_t, int64_t, int64_t);
DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::gpu
