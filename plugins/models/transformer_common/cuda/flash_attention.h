// Fused (flash-style) causal grouped-query attention on CUDA, bf16 operands
// on the tensor cores with fp32 scores and accumulation: the T x T scores
// never leave shared memory. Forward keeps each query row's logsumexp;
// backward recomputes the probabilities from it, one kernel for dK and dV
// (a block per key tile, the group's query heads added in head order) and
// one for dQ (a block per query tile), so no float atomics are used and a
// pass repeats bit for bit. Head sizes up to 128 (padded to 16, 32, 64 or
// 128 in shared memory). Shared by nvcc (C++17) and g++ (C++20).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dscore::transformer::gpu {

// As cpu::AttentionShape: q (B, T) rows of stride q_ld, query head h at
// channel h * head_dim; k and v rows of stride kv_ld, key/value head g at
// g * head_dim, read by query heads g * NH / NKV .. (g + 1) * NH / NKV - 1;
// out laid out as q with stride out_ld. Gradients share the layout of what
// they are the gradient of. Scores are scaled by 1 / sqrt(head_dim).
struct FlashShape {
  int64_t B = 0, Tn = 0, NH = 0, NKV = 0, head_dim = 0;
  int64_t q_ld = 0, kv_ld = 0, out_ld = 0;
};

constexpr int64_t kFlashMaxHeadDim = 128;

// lse (B, NH, T) fp32: the logsumexp of each query row's scaled scores.
// cudaErrorInvalidValue for a head size above kFlashMaxHeadDim or NH not a
// multiple of NKV.
cudaError_t flash_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q,
                                    const __nv_bfloat16* k, const __nv_bfloat16* v,
                                    const FlashShape& shape, cudaStream_t stream);

// dq, dk and dv are overwritten (each head's head_dim channels of each row)
// from dout, the forward's inputs, its output and lse. row_dots: scratch of
// B * NH * T floats (each query row's dout . out).
cudaError_t flash_attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                     const __nv_bfloat16* dout, const __nv_bfloat16* q,
                                     const __nv_bfloat16* k, const __nv_bfloat16* v,
                                     const __nv_bfloat16* out, const float* lse, float* row_dots,
                                     const FlashShape& shape, cudaStream_t stream);

}  // namespace dscore::transformer::gpu
