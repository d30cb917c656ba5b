// The GPT model's CPU kernels, forward and backward, for T = float (the
// plugin) and T = double (the finite-difference gradient checks). Layout is
// row-major: activations (N = B*T rows, C channels), weights as PyTorch's
// nn.Linear (out, in). Matmuls go through BLAS (gemm.h); everything else is
// parallel over fixed blocks with TBB, so results do not depend on the
// number of threads. Weight and bias gradients ACCUMULATE (+=); input
// gradients named `dinp` are overwritten unless stated otherwise.
#pragma once

#include <cstdint>

#include "attention.h"  // causal self-attention, tiled

namespace dscore::gpt::cpu {

// out[b,t,:] = wte[tokens[b,t]] + wpe[t]; a token id < 0 (padding) embeds as 0.
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t Tn, int64_t C);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t Tn,
                      int64_t C);

// LayerNorm over the last dimension, eps 1e-5 (PyTorch's default).
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C);
// dinp is ACCUMULATED (the residual stream's gradient flows through).
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C);

// out (N, OC) = inp (N, C) * weight(OC, C)^T + bias (bias may be null).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC);
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC);

// GPT-2's GELU (tanh approximation).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);  // out = a + b (out may alias a)

// The tied LM head with cross-entropy, over N rows in blocks (the N x V
// logits never exist at once): loss_i = logsumexp(x_i wte^T) - logit at
// targets[i]; rows whose target is < 0 are ignored. Overwrites dx with
// d(sum_i grad_scale * loss_i)/dx and accumulates the same into dwte.
// Returns the sum of loss_i over the counted rows.
template <typename T>
double lm_head_forward_backward(T* dx, T* dwte, const T* x, const T* wte, const int32_t* targets,
                                int64_t N, int64_t C, int64_t V, double grad_scale);
// Forward only: the loss sum over rows with targets >= 0 (targets may be
// null: no loss), and the logits of rows `rows[0..n_rows)` into
// logits (n_rows, V) if non-null.
template <typename T>
double lm_head_forward(const T* x, const T* wte, const int32_t* targets, int64_t N, int64_t C,
                       int64_t V, const int64_t* rows, int64_t n_rows, float* logits);

}  // namespace dscore::gpt::cpu
