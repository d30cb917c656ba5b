// llama's CudaBackend (cuda_backend.h): its own steps over the kernels of
// llama_cuda_kernels.h, and grouped-query attention: fused (bf16 by
// default, flash_attention.h), or through cuBLAS and the gpt backend's
// causal softmax. Query head h = g * group + r reads key/value head g;
// unfused, per sample, each r is one strided-batched GEMM over the NKV
// groups, and the group's query heads add into dk and dv in order of r.
#include "cuda_backend.h"

#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <type_traits>

#include "../../transformer_common/cuda/cuda_gemm.h"
#include "../../transformer_common/cuda/cuda_kernels.h"
#include "../rope.h"
#include "llama_cuda_kernels.h"

namespace dscore::llama::gpu {

using gpt::gpu::gemm;
using gpt::gpu::Op;
using gpt::gpu::Scratch;

namespace {

transformer::gpu::FlashShape flash_shape(const transformer::cpu::AttentionShape& s) {
  return {s.B, s.Tn, s.NH, s.NKV, s.head_dim, s.q_ld, s.kv_ld, s.out_ld};
}

}  // namespace

template <typename S>
void CudaBackend<S>::rope_tables(S* cos, S* sin, const std::vector<double>& inv_freq, int64_t Tn) {
  const size_t n = static_cast<size_t>(Tn) * inv_freq.size();
  std::vector<float> c(n), s(n);
  llama::rope_tables(c.data(), s.data(), inv_freq, Tn);
  std::vector<S> cs(n), ss(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<S, float>) {
      cs[i] = c[i];
      ss[i] = s[i];
    } else {
      cs[i] = __float2bfloat16_rn(c[i]);
      ss[i] = __float2bfloat16_rn(s[i]);
    }
  }
  auto& context = this->context();
  context.make_current();
  DSCORE_GPT_CUDA_CHECK(
      cudaMemcpyAsync(cos, cs.data(), n * sizeof(S), cudaMemcpyHostToDevice, context.stream()));
  DSCORE_GPT_CUDA_CHECK(
      cudaMemcpyAsync(sin, ss.data(), n * sizeof(S), cudaMemcpyHostToDevice, context.stream()));
  context.synchronize();  // the host tables go out of scope
}

template <typename S>
void CudaBackend<S>::embedding_forward(S* out, const int32_t* tokens, const S* embed, int64_t N,
                                       int64_t C) {
  DSCORE_GPT_CUDA_CHECK(gpu::embedding_forward(out, tokens, embed, N, C, this->context().stream()));
}

template <typename S>
void CudaBackend<S>::rmsnorm_forward(S* out, float* rstd, const S* inp, const S* w, int64_t N,
                                     int64_t C, double eps) {
  DSCORE_GPT_CUDA_CHECK(gpu::rmsnorm_forward(out, rstd, inp, w, N, C, static_cast<float>(eps),
                                             this->context().stream()));
}

template <typename S>
void CudaBackend<S>::rmsnorm_backward(S* dinp, S* dw, const S* dout, const S* inp, const S* w,
                                      const float* rstd, int64_t N, int64_t C) {
  const cudaStream_t stream = this->context().stream();
  DSCORE_GPT_CUDA_CHECK(rmsnorm_backward_input(dinp, dout, inp, w, rstd, N, C, stream));
  DSCORE_GPT_CUDA_CHECK(rmsnorm_backward_weight(dw, dout, inp, rstd, N, C, stream));
}

template <typename S>
void CudaBackend<S>::rope_forward(S* x, const S* cos, const S* sin, int64_t B, int64_t Tn,
                                  int64_t heads, int64_t head_dim, int64_t ld) {
  DSCORE_GPT_CUDA_CHECK(
      rope(x, cos, sin, B, Tn, heads, head_dim, ld, false, this->context().stream()));
}

template <typename S>
void CudaBackend<S>::rope_backward(S* dx, const S* cos, const S* sin, int64_t B, int64_t Tn,
                                   int64_t heads, int64_t head_dim, int64_t ld) {
  DSCORE_GPT_CUDA_CHECK(
      rope(dx, cos, sin, B, Tn, heads, head_dim, ld, true, this->context().stream()));
}

template <typename S>
void CudaBackend<S>::swiglu_forward(S* out, const S* gate, const S* up, int64_t n) {
  DSCORE_GPT_CUDA_CHECK(gpu::swiglu_forward(out, gate, up, n, this->context().stream()));
}

template <typename S>
void CudaBackend<S>::swiglu_backward(S* dgate, S* dup, const S* dout, const S* gate, const S* up,
                                     int64_t n) {
  DSCORE_GPT_CUDA_CHECK(
      gpu::swiglu_backward(dgate, dup, dout, gate, up, n, this->context().stream()));
}

// dinp (N, C) (+)= dout w; dw (OC, C) += dout^T inp (as gpt's backend).
template <typename S>
void CudaBackend<S>::matmul_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w,
                                     int64_t N, int64_t C, int64_t OC, bool accumulate_dinp) {
  if (db != nullptr)
    throw sdk::Error(DSCORE_INTERNAL, "llama: the CUDA backend's matmul has no bias");
  auto& context = this->context();
  gemm(context, Op::kN, Op::kN, C, N, OC, 1.0f, w, C, dout, OC, accumulate_dinp ? 1.0f : 0.0f, dinp,
       C);
  gemm(context, Op::kN, Op::kT, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C);
}

template <typename S>
void CudaBackend<S>::attention_forward(S* out, S* att, const S* q, const S* k, const S* v,
                                       const Shape& sh) {
  auto& context = this->context();
  if (this->fused_attention()) {
    gpt::gpu::fused_attention_forward(context, out, att, q, k, v, flash_shape(sh));
    return;
  }
  const int64_t Tn = sh.Tn, hd = sh.head_dim, TT = Tn * Tn, group = sh.NH / sh.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto* scores = static_cast<float*>(
      context.scratch(Scratch::kScores, static_cast<size_t>(sh.NH * TT) * sizeof(float)));
  for (int64_t b = 0; b < sh.B; ++b) {
    const S* qb = q + b * Tn * sh.q_ld;
    const S* kb = k + b * Tn * sh.kv_ld;
    const S* vb = v + b * Tn * sh.kv_ld;
    S* p = att + b * sh.NH * TT;
    // scores[h] (T, T) = scale Q_h K_g^T for h = g group + r: cuBLAS (T x T) = K_g (op T) Q_h^T.
    for (int64_t r = 0; r < group; ++r)
      gemm(context, Op::kT, Op::kN, Tn, Tn, hd, scale, kb, sh.kv_ld, qb + r * hd, sh.q_ld, 0.0f,
           scores + r * TT, Tn, sh.NKV, hd, group * hd, group * TT);
    DSCORE_GPT_CUDA_CHECK(
        gpt::gpu::causal_softmax_forward(p, scores, sh.NH * Tn, Tn, context.stream()));
    // out_h (T, hd) = P_h V_g: cuBLAS (hd x T) = V_g^T P_h^T.
    for (int64_t r = 0; r < group; ++r)
      gemm(context, Op::kN, Op::kN, hd, Tn, Tn, 1.0f, vb, sh.kv_ld, p + r * TT, Tn, 0.0f,
           out + b * Tn * sh.out_ld + r * hd, sh.out_ld, sh.NKV, hd, group * TT, group * hd);
  }
}

template <typename S>
void CudaBackend<S>::attention_backward(S* dq, S* dk, S* dv, const S* dout, const S* q, const S* k,
                                        const S* v, const S* out, const S* att, const Shape& sh) {
  auto& context = this->context();
  if (this->fused_attention()) {
    gpt::gpu::fused_attention_backward(context, dq, dk, dv, dout, q, k, v, out, att,
                                       flash_shape(sh));
    return;
  }
  const int64_t Tn = sh.Tn, hd = sh.head_dim, TT = Tn * Tn, group = sh.NH / sh.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto* datt = static_cast<float*>(
      context.scratch(Scratch::kScores, static_cast<size_t>(sh.NH * TT) * sizeof(float)));
  auto* ds = static_cast<S*>(
      context.scratch(Scratch::kAttentionGrad, static_cast<size_t>(sh.NH * TT) * sizeof(S)));
  for (int64_t b = 0; b < sh.B; ++b) {
    const S* qb = q + b * Tn * sh.q_ld;
    const S* kb = k + b * Tn * sh.kv_ld;
    const S* vb = v + b * Tn * sh.kv_ld;
    S* dqb = dq + b * Tn * sh.q_ld;
    S* dkb = dk + b * Tn * sh.kv_ld;
    S* dvb = dv + b * Tn * sh.kv_ld;
    const S* dy = dout + b * Tn * sh.out_ld;
    const S* p = att + b * sh.NH * TT;
    for (int64_t r = 0; r < group; ++r) {
      const float beta = r == 0 ? 0.0f : 1.0f;  // the group's heads add into dk, dv in order
      // dP_h (T, T) = dY_h V_g^T: cuBLAS (T x T) = V_g (op T) dY_h^T.
      gemm(context, Op::kT, Op::kN, Tn, Tn, hd, 1.0f, vb, sh.kv_ld, dy + r * hd, sh.out_ld, 0.0f,
           datt + r * TT, Tn, sh.NKV, hd, group * hd, group * TT);
      // dV_g += P_h^T dY_h: cuBLAS (hd x T) = dY_h^T P_h (op T).
      gemm(context, Op::kN, Op::kT, hd, Tn, Tn, 1.0f, dy + r * hd, sh.out_ld, p + r * TT, Tn, beta,
           dvb, sh.kv_ld, sh.NKV, group * hd, group * TT, hd);
    }
    DSCORE_GPT_CUDA_CHECK(
        gpt::gpu::causal_softmax_backward(ds, p, datt, sh.NH * Tn, Tn, context.stream()));
    for (int64_t r = 0; r < group; ++r) {
      const float beta = r == 0 ? 0.0f : 1.0f;
      // dQ_h = scale dS_h K_g: cuBLAS (hd x T) = K_g^T dS_h^T.
      gemm(context, Op::kN, Op::kN, hd, Tn, Tn, scale, kb, sh.kv_ld, ds + r * TT, Tn, 0.0f,
           dqb + r * hd, sh.q_ld, sh.NKV, hd, group * TT, group * hd);
      // dK_g += scale dS_h^T Q_h: cuBLAS (hd x T) = Q_h^T dS_h (op T).
      gemm(context, Op::kN, Op::kT, hd, Tn, Tn, scale, qb + r * hd, sh.q_ld, ds + r * TT, Tn, beta,
           dkb, sh.kv_ld, sh.NKV, group * hd, group * TT, hd);
    }
  }
}

template class CudaBackend<float>;
template class CudaBackend<__nv_bfloat16>;

}  // namespace dscore::llama::gpu
