// Causal self-attention of the CUDA backend (cuda_backend.h). Fused (bf16
// by default): the kernels of flash_attention.h, keeping each query row's
// logsumexp as the attention state. Unfused, one sample at a time: the NH
// heads' scores by one strided-batched GEMM into fp32 scratch, the causal
// softmax into att (B, NH, T, T), kept by the runner as the attention state,
// then att V. Its backward mirrors it: dP = dY V^T, dV = P^T dY, the softmax
// gradient, dQ = scale dS K, dK = scale dS^T Q. qkv rows are [q | k | v] of
// 3C channels; head h owns channels h*hs .. (h+1)*hs of each.
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include <dscore/cpp/plugin.hpp>

#include "cuda_backend.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "flash_attention.h"

namespace dscore::gpt::gpu {

namespace {

using transformer::gpu::FlashShape;

// The fused kernels' shape for heads of size hs, with the fix when they do
// not take it.
void check_fused_head_size(int64_t hs) {
  if (hs > transformer::gpu::kFlashMaxHeadDim)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "the fused CUDA attention takes head sizes up to " +
                         std::to_string(transformer::gpu::kFlashMaxHeadDim) + "; this model's is " +
                         std::to_string(hs) + ": set DSCORE_CUDA_ATTENTION=unfused");
}

}  // namespace

template <typename S>
void fused_attention_forward(CudaContext& context, S* out, S* state, const S* q, const S* k,
                             const S* v, const FlashShape& shape) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    check_fused_head_size(shape.head_dim);
    DSCORE_GPT_CUDA_CHECK(transformer::gpu::flash_attention_forward(
        out, reinterpret_cast<float*>(state), q, k, v, shape, context.stream()));
  } else {
    throw sdk::Error(DSCORE_INTERNAL, "the fused CUDA attention runs on bf16 only");
  }
}

template <typename S>
void fused_attention_backward(CudaContext& context, S* dq, S* dk, S* dv, const S* dout, const S* q,
                              const S* k, const S* v, const S* out, const S* state,
                              const FlashShape& shape) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    check_fused_head_size(shape.head_dim);
    auto* row_dots = static_cast<float*>(
        context.scratch(Scratch::kAttentionRowDots,
                        static_cast<size_t>(shape.B * shape.NH * shape.Tn) * sizeof(float)));
    DSCORE_GPT_CUDA_CHECK(transformer::gpu::flash_attention_backward(
        dq, dk, dv, dout, q, k, v, out, reinterpret_cast<const float*>(state), row_dots, shape,
        context.stream()));
  } else {
    throw sdk::Error(DSCORE_INTERNAL, "the fused CUDA attention runs on bf16 only");
  }
}

template <typename S>
void CudaBackend<S>::attention_forward(S* out, S* att, const S* qkv, int64_t B, int64_t Tn,
                                       int64_t C, int64_t NH) {
  const int64_t hs = C / NH, ld = 3 * C, TT = Tn * Tn;
  if (fused_attention_) {
    fused_attention_forward(*context_, out, att, qkv, qkv + C, qkv + 2 * C,
                            FlashShape{B, Tn, NH, NH, hs, ld, ld, C});
    return;
  }
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
void CudaBackend<S>::attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out,
                                        const S* att, int64_t B, int64_t Tn, int64_t C,
                                        int64_t NH) {
  const int64_t hs = C / NH, ld = 3 * C, TT = Tn * Tn;
  if (fused_attention_) {
    fused_attention_backward(*context_, dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C,
                             qkv + 2 * C, out, att, FlashShape{B, Tn, NH, NH, hs, ld, ld, C});
    return;
  }
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

#define DSCORE_GPT_INSTANTIATE(S)                                                                \
  template void fused_attention_forward(CudaContext&, S*, S*, const S*, const S*, const S*,      \
                                        const FlashShape&);                                      \
  template void fused_attention_backward(CudaContext&, S*, S*, S*, const S*, const S*, const S*, \
                                         const S*, const S*, const S*, const FlashShape&);       \
  template void CudaBackend<S>::attention_forward(S*, S*, const S*, int64_t, int64_t, int64_t,   \
                                                  int64_t);                                      \
  template void CudaBackend<S>::attention_backward(S*, const S*, const S*, const S*, const S*,   \
                                                   int64_t, int64_t, int64_t, int64_t);
DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::gpu
