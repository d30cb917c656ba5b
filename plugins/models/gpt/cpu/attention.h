// GPT's causal multi-head self-attention on packed q|k|v rows: the shared
// tiled kernels (plugins/models/transformer_common/cpu/attention.h) with as many
// key/value heads as query heads.
#pragma once

#include <cstdint>

#include "../../transformer_common/cpu/attention.h"

namespace dscore::gpt::cpu {

using transformer::cpu::attention_state_elements;
using transformer::cpu::kAttentionKeyBlock;
using transformer::cpu::kAttentionQueryBlock;

// qkv (B, T, 3C) = [q | k | v], heads of C / NH channels.
inline transformer::cpu::AttentionShape packed_attention_shape(int64_t B, int64_t Tn, int64_t C,
                                                               int64_t NH) {
  return {B, Tn, NH, NH, C / NH, 3 * C, 3 * C, C};
}

// out (B, T, C); lse (B, NH, T), the state attention_backward reads.
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t NH) {
  transformer::cpu::attention_forward(out, lse, qkv, qkv + C, qkv + 2 * C,
                                      packed_attention_shape(B, Tn, C, NH));
}

// dqkv (B, T, 3C) is overwritten from dout (B, T, C), the forward's inputs
// qkv, its output out and its state lse.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                        int64_t Tn, int64_t C, int64_t NH) {
  transformer::cpu::attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C,
                                       qkv + 2 * C, out, lse, packed_attention_shape(B, Tn, C, NH));
}

}  // namespace dscore::gpt::cpu
