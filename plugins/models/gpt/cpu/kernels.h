// The GPT model's CPU kernels, forward and backward, for T = float (the
// plugin) and T = double (the finite-difference gradient checks): its own
// (embeddings with positions, LayerNorm, GELU) and, named into this
// namespace, the ones it shares with the llama model (plugins/models/transformer_common/cpu:
// nn.Linear, the residual add, the LM head, attention). Layout is
// row-major: activations (N = B*T rows, C channels), weights as PyTorch's
// nn.Linear (out, in). Everything is parallel over fixed blocks with TBB,
// so results do not depend on the number of threads. Weight and bias
// gradients ACCUMULATE (+=); input gradients named `dinp` are overwritten
// unless stated otherwise.
#pragma once

#include <cstdint>

#include "../../transformer_common/cpu/linear.h"
#include "../../transformer_common/cpu/row_sums.h"
#include "attention.h"  // causal self-attention on packed qkv, tiled

namespace dscore::gpt::cpu {

using transformer::cpu::add;
using transformer::cpu::lm_head_forward;
using transformer::cpu::lm_head_forward_backward;
using transformer::cpu::matmul_backward;
using transformer::cpu::matmul_forward;

// out[b,t,:] = wte[tokens[b,t]] + wpe[t]; a token id < 0 (padding) embeds as 0.
// Under tensor parallelism wte holds vocabulary rows [v0, v0 + rows) only:
// a token outside them contributes nothing here (another rank holds it),
// and wpe may be null (added on one rank only).
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t Tn, int64_t C, int64_t v0 = 0, int64_t rows = INT64_MAX);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t Tn,
                      int64_t C, int64_t v0 = 0, int64_t rows = INT64_MAX);

// LayerNorm over the last dimension, eps 1e-5 (PyTorch's default).
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C);
// The residual add fused with the LayerNorm after it: sum = a + b (kept:
// the next residual add and LayerNorm's backward read it), then
// out = layernorm(sum), row by row while the row is in cache. The same bits
// as add then layernorm_forward. out may alias b (each row of b is read
// before that row of out is written).
template <typename T>
void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b,
                                const T* weight, const T* bias, int64_t N, int64_t C);
// dinp is ACCUMULATED (the residual stream's gradient flows through).
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C);

// GPT-2's GELU (tanh approximation).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);
// gelu_backward over (N, OC) fused with the bias gradient of the linear
// layer before it: dbias (OC) += the sum of dinp's rows, added as
// matmul_backward adds a bias gradient (row_sums.h), so the same bits as
// gelu_backward followed by matmul_backward with that dbias.
template <typename T>
void gelu_backward_bias(T* dinp, T* dbias, const T* inp, const T* dout, int64_t N, int64_t OC);

// For bf16 layers (the next product on the bf16 GEMM): values rounded to
// bf16 (nearest even, as bf16_round.h's round_to_bf16) as they are made, so
// no fp32 copy is written and read again. The LayerNorms whose output only
// a bf16 linear reads (mean and rstd, and the residual sum, stay fp32): the
// bits of layernorm_forward (residual_layernorm_forward) followed by
// round_to_bf16. out must not alias the inputs.
void layernorm_forward_bf16(uint16_t* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t N, int64_t C);
void residual_layernorm_forward_bf16(float* sum, uint16_t* out, float* mean, float* rstd,
                                     const float* a, const float* b, const float* weight,
                                     const float* bias, int64_t N, int64_t C);
// GELU on rows r0..r1 of the fc linear's output as its product hands them
// over (rows: r1 - r0 rows of OC): the rows are kept in fch (for GELU's
// backward) and their GELU rounded into out's rows. Over all rows, the bits
// of gelu_forward followed by round_to_bf16.
void gelu_forward_bf16_rows(float* fch, uint16_t* out, const float* rows, int64_t r0, int64_t r1,
                            int64_t OC);
// GELU's gradient with the bias gradient of the linear before it, on rows
// r0..r1 of dout as the product that makes them hands them over
// (matmul_backward_bf16_consumed; dout_rows: r1 - r0 rows of OC, then
// overwritten): rounded into dinp's rows, and summed into dbias's block
// partials. Over all rows, the bits of gelu_backward_bias followed by
// round_to_bf16, dbias (after dbias.sum_into) included.
void gelu_backward_bias_bf16_rows(uint16_t* dinp, transformer::cpu::RowSumPartials<float>& dbias,
                                  const float* inp, float* dout_rows, int64_t r0, int64_t r1,
                                  int64_t OC);

}  // namespace dscore::gpt::cpu
