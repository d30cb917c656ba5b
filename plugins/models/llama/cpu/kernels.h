// The llama model's own CPU kernels, forward and backward, for T = float
// (the plugin) and T = double (the finite-difference gradient checks):
// token embedding, RMSNorm, rotary embeddings and SwiGLU. The rest (nn.Linear,
// attention, the LM head) are the kernels shared with gpt in
// plugins/models/transformer_common/cpu. Row-major activations (N = B*T rows); weight
// gradients ACCUMULATE (+=). Parallel over fixed blocks with TBB, so
// results do not depend on the number of threads.
#pragma once

#include <cstdint>

namespace dscore::llama::cpu {

// out[r] = embed[tokens[r]] (N, C); a token id < 0 (padding) embeds as 0.
// Under tensor parallelism embed holds vocabulary rows [v0, v0 + rows)
// only: a token outside them embeds as zeros here (another rank holds it).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* embed, int64_t N, int64_t C,
                       int64_t v0 = 0, int64_t rows = INT64_MAX);
// The same from bf16 rows (a bf16 parameter's view; exact in fp32), so the
// 32000 x C table is not converted whole on every acquire for the N rows
// looked up.
void embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* embed, int64_t N,
                            int64_t C, int64_t v0 = 0, int64_t rows = INT64_MAX);
template <typename T>
void embedding_backward(T* dembed, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                        int64_t v0 = 0, int64_t rows = INT64_MAX);

// RMSNorm as transformers' LlamaRMSNorm: out = x * rsqrt(mean(x^2) + eps)
// * weight, keeping rstd (N) for backward.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     double eps);
// dinp is ACCUMULATED (the residual stream's gradient flows through).
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t N, int64_t C);

// Rotary embeddings in place on x: (B, T) rows of stride ld, `heads` heads
// of head_dim channels from each row's start; channel i < head_dim / 2
// pairs with i + head_dim / 2 (transformers' rotate_half):
// x_i' = x_i cos - x_{i+h} sin, x_{i+h}' = x_{i+h} cos + x_i sin, with
// cos/sin (T, head_dim / 2) from rope_tables (rope.h). Backward rotates a
// gradient back (the transpose), also in place.
template <typename T>
void rope_forward(T* x, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
                  int64_t head_dim, int64_t ld);
template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
                   int64_t head_dim, int64_t ld);

// SwiGLU's gate: out = silu(gate) * up, silu(x) = x sigmoid(x) (n elements).
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);
// For bf16 layers, where a bf16 linear is the output's only reader: the
// same values rounded to bf16 as they are made (the bits of the fp32
// kernel followed by round_to_bf16; rstd stays fp32).
void rmsnorm_forward_bf16(uint16_t* out, float* rstd, const float* inp, const float* weight,
                          int64_t N, int64_t C, double eps);
void swiglu_forward_bf16(uint16_t* out, const float* gate, const float* up, int64_t n);
// dgate and dup from dout (dgate may alias dout).
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);
// For bf16 layers: swiglu_backward on rows r0..r1 of dout as the product
// that makes them hands them over (down_proj's input gradient,
// matmul_backward_bf16_consumed; dout_rows: r1 - r0 rows of I, then
// overwritten), dgate and dup rounded into their rows (gate_proj's and
// up_proj's output gradients, as operands). The bits of swiglu_backward
// followed by round_to_bf16.
void swiglu_backward_bf16_rows(uint16_t* dgate, uint16_t* dup, float* dout_rows, const float* gate,
                               const float* up, int64_t r0, int64_t r1, int64_t I);

}  // namespace dscore::llama::cpu
