// The CUDA backend of the llama runner (runner.h lists what a backend
// provides), for S = float or __nv_bfloat16: the gpt model's CUDA backend
// (device memory, parameter upload, gradient download, cuBLAS matmuls, the
// residual add and the LM head) plus llama's steps: the embedding, RMSNorm,
// rotary embeddings, SwiGLU (llama_cuda_kernels.h) and grouped-query
// attention. Like gpt's, the attention state is each query row's logsumexp
// (fused) or the softmax probabilities (B, NH, T, T) (unfused), and nothing
// uses float atomics.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "../../transformer_common/cpu/attention.h"
#include "../../transformer_common/cuda/cuda_backend.h"

namespace dscore::llama::gpu {

template <typename S>
class CudaBackend : public gpt::gpu::CudaBackend<S> {
 public:
  using Shape = transformer::cpu::AttentionShape;

  // cos/sin (T, hd / 2) of t * inv_freq, computed in double, stored as S.
  void rope_tables(S* cos, S* sin, const std::vector<double>& inv_freq, int64_t Tn);
  void embedding_forward(S* out, const int32_t* tokens, const S* embed, int64_t N, int64_t C);
  void rmsnorm_forward(S* out, float* rstd, const S* inp, const S* w, int64_t N, int64_t C,
                       double eps);
  void rmsnorm_backward(S* dinp, S* dw, const S* dout, const S* inp, const S* w, const float* rstd,
                        int64_t N, int64_t C);
  void rope_forward(S* x, const S* cos, const S* sin, int64_t B, int64_t Tn, int64_t heads,
                    int64_t head_dim, int64_t ld);
  void rope_backward(S* dx, const S* cos, const S* sin, int64_t B, int64_t Tn, int64_t heads,
                     int64_t head_dim, int64_t ld);
  void swiglu_forward(S* out, const S* gate, const S* up, int64_t n);
  void swiglu_backward(S* dgate, S* dup, const S* dout, const S* gate, const S* up, int64_t n);
  // No bias (db must be null); dinp += instead of = with accumulate_dinp.
  void matmul_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w, int64_t N,
                       int64_t C, int64_t OC, bool accumulate_dinp = false);
  void attention_forward(S* out, S* att, const S* q, const S* k, const S* v, const Shape& shape);
  void attention_backward(S* dq, S* dk, S* dv, const S* dout, const S* q, const S* k, const S* v,
                          const S* out, const S* att, const Shape& shape);
};

extern template class CudaBackend<float>;
extern template class CudaBackend<__nv_bfloat16>;

}  // namespace dscore::llama::gpu
