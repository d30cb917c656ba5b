// Launchers of the GPT model's CUDA kernels (elementwise.cu, layernorm.cu,
// softmax.cu), for S = float or __nv_bfloat16 (the storage
// type of activations and parameters; every kernel computes in fp32). Each
// enqueues on `stream` and returns cudaGetLastError(); none synchronizes.
// Shared by nvcc (C++17) and g++ (C++20): CUDA runtime types only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "../cuda_pass_memory.h"

namespace dscore::gpt::gpu {

// The element type of a host view being uploaded.
enum class HostType : int { kF32, kBf16, kF16 };

// A cheap call that fails (cudaErrorNoKernelImageForDevice) when the kernels
// were not built for this GPU's architecture.
cudaError_t probe_kernels();

// dst (n) = src (n, of type `type`) converted to S, rounding to nearest even.
template <typename S>
cudaError_t convert(S* dst, const void* src, HostType type, int64_t n, cudaStream_t stream);

// out (B*T, C) = wte[tokens] + wpe[t]; token ids < 0 (padding) embed as 0.
template <typename S>
cudaError_t encoder_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int64_t B,
                            int64_t T, int64_t C, cudaStream_t stream);
// dwpe (T, C) += sum over b of dout (B, T, C).
template <typename S>
cudaError_t encoder_dwpe(S* dwpe, const S* dout, int64_t B, int64_t T, int64_t C,
                         cudaStream_t stream);
// dwte[token] += sum of dout's rows that embed `token`, deterministically:
// index = [token (buckets) | start (buckets + 1) | row (rows)], the rows of
// each bucket in increasing order, one bucket per distinct token (int32).
template <typename S>
cudaError_t encoder_dwte(S* dwte, const S* dout, const int32_t* index, int64_t buckets, int64_t C,
                         cudaStream_t stream);

// LayerNorm, eps 1e-5, fp32 statistics; one warp per row.
template <typename S>
cudaError_t layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* weight,
                              const S* bias, int64_t N, int64_t C, cudaStream_t stream);
// dinp (N, C) += LayerNorm's input gradient (the weight/bias gradients are
// column_sums with the LayerNorm's input).
template <typename S>
cudaError_t layernorm_backward_input(S* dinp, const S* dout, const S* inp, const S* weight,
                                     const float* mean, const float* rstd, int64_t N, int64_t C,
                                     cudaStream_t stream);

// Column sums over N rows, in a fixed order (no atomics): dsum[c] +=
// sum_r dout[r, c]; with inp (LayerNorm), also dnorm[c] += sum_r dout[r, c] *
// (inp[r, c] - mean[r]) * rstd[r]. `partials` is scratch of
// column_sum_partials(N, C) floats.
using transformer::cuda_memory::column_sum_partials;
using transformer::cuda_memory::column_sum_rows_per_chunk;
template <typename S>
cudaError_t column_sums(S* dsum, S* dnorm, const S* dout, const S* inp, const float* mean,
                        const float* rstd, int64_t N, int64_t C, float* partials,
                        cudaStream_t stream);

// out (N, OC) = bias broadcast over rows (the GEMM then adds with beta = 1).
template <typename S>
cudaError_t broadcast_rows(S* out, const S* bias, int64_t N, int64_t OC, cudaStream_t stream);

// GPT-2's GELU (tanh approximation), forward and backward (dinp overwritten).
template <typename S>
cudaError_t gelu_forward(S* out, const S* inp, int64_t n, cudaStream_t stream);
template <typename S>
cudaError_t gelu_backward(S* dinp, const S* inp, const S* dout, int64_t n, cudaStream_t stream);
// out = a + b (out may alias a or b).
template <typename S>
cudaError_t add(S* out, const S* a, const S* b, int64_t n, cudaStream_t stream);
// dst += src (fp32), rounding once into S.
template <typename S>
cudaError_t add_float(S* dst, const float* src, int64_t n, cudaStream_t stream);
// dst (n, of type `type`, device memory) += src, added in fp32 and rounded
// once to nearest even into `type`: the same bits as the host's add into a
// gradient view (cuda_backend.cc add_into_view).
template <typename S>
cudaError_t add_into(void* dst, HostType type, const S* src, int64_t n, cudaStream_t stream);

// Causal softmax of `rows` rows of T scores (row r is query position r % T):
// att[r, s] = softmax over s <= t of scores[r, s], 0 above the diagonal.
template <typename S>
cudaError_t causal_softmax_forward(S* att, const float* scores, int64_t rows, int64_t T,
                                   cudaStream_t stream);
// ds[r, s] = att[r, s] * (datt[r, s] - sum_s' att[r, s'] datt[r, s']) for
// s <= t, 0 above the diagonal.
template <typename S>
cudaError_t causal_softmax_backward(S* ds, const S* att, const float* datt, int64_t rows, int64_t T,
                                    cudaStream_t stream);

// Cross-entropy over `rows` rows of V fp32 logits, row r at logits + r * ld
// (dlogits likewise; ld >= V); one block per row.
// row_loss[r] = logsumexp(logits[r]) - logits[r, targets[r]], or 0 when
// targets[r] < 0 (ignored); skipped when row_loss is null. When dlogits is
// non-null: dlogits[r] = grad_scale * (softmax(logits[r]) - onehot), 0 for
// ignored rows. For S = float dlogits may be `logits` itself (in place).
template <typename S>
cudaError_t cross_entropy(S* dlogits, double* row_loss, const float* logits, const int32_t* targets,
                          int64_t rows, int64_t V, int64_t ld, float grad_scale,
                          cudaStream_t stream);

}  // namespace dscore::gpt::gpu
