// Launchers of the llama model's own CUDA kernels (llama_kernels.cu), the
// device counterparts of cpu/kernels.h, for S = float or __nv_bfloat16 (the
// storage type; every kernel computes in fp32). Each enqueues on `stream`
// and returns cudaGetLastError(); none synchronizes. Deterministic: no
// atomics, every sum in a fixed order. Held equal to the CPU kernels by
// tests/plugins/models/llama/llama_cuda_kernels_test.cc (label gpu).
// Shared by nvcc (C++17) and g++ (C++20): CUDA runtime types only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dscore::llama::gpu {

// out[r] = embed[tokens[r]] (N, C); a token id < 0 (padding) embeds as 0.
template <typename S>
cudaError_t embedding_forward(S* out, const int32_t* tokens, const S* embed, int64_t N, int64_t C,
                              cudaStream_t stream);

// out = x * rsqrt(mean(x^2) + eps) * weight per row of C; rstd (N) kept.
// One warp per row.
template <typename S>
cudaError_t rmsnorm_forward(S* out, float* rstd, const S* inp, const S* weight, int64_t N,
                            int64_t C, float eps, cudaStream_t stream);
// dinp (N, C) += RMSNorm's input gradient; one warp per row.
template <typename S>
cudaError_t rmsnorm_backward_input(S* dinp, const S* dout, const S* inp, const S* weight,
                                   const float* rstd, int64_t N, int64_t C, cudaStream_t stream);
// dweight (C) += sum over rows of dout * inp * rstd, rows in order (one
// thread per column).
template <typename S>
cudaError_t rmsnorm_backward_weight(S* dweight, const S* dout, const S* inp, const float* rstd,
                                    int64_t N, int64_t C, cudaStream_t stream);

// Rotary embeddings in place on x ((B, T) rows of stride ld, `heads` heads
// of head_dim from each row's start), cos/sin (T, head_dim / 2), as
// cpu::rope_forward; backward (transpose = true) rotates a gradient back.
template <typename S>
cudaError_t rope(S* x, const S* cos, const S* sin, int64_t B, int64_t T, int64_t heads,
                 int64_t head_dim, int64_t ld, bool transpose, cudaStream_t stream);

// out = silu(gate) * up; backward: dgate, dup from dout (dgate may alias dout).
template <typename S>
cudaError_t swiglu_forward(S* out, const S* gate, const S* up, int64_t n, cudaStream_t stream);
template <typename S>
cudaError_t swiglu_backward(S* dgate, S* dup, const S* dout, const S* gate, const S* up, int64_t n,
                            cudaStream_t stream);

}  // namespace dscore::llama::gpu
