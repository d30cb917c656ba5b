// Causal grouped-query self-attention of the CPU transformer kernels, tiled
// (flash-style): the T x T probabilities never exist. Forward streams key
// blocks past each block of query rows with an online softmax and keeps
// only each row's logsumexp; backward recomputes the probabilities tile by
// tile from q, k and that logsumexp. Fixed tiles and fixed task boundaries
// make every result independent of the thread count. T = float (the
// plugins) and T = double (the finite-difference gradient checks).
//
// NH query heads share NKV key/value heads (NH % NKV == 0): query head h
// reads key/value head h / (NH / NKV), as transformers' repeat_kv. GPT's
// multi-head attention is NKV == NH with q, k and v packed in one row.
#pragma once

#include <cstdint>

#include "vector_math.h"

namespace dscore::transformer::cpu {

// Rows of queries and keys per tile (see docs/gpt.md for the measurement).
constexpr int64_t kAttentionQueryBlock = 64;
constexpr int64_t kAttentionKeyBlock = 64;

// Elements of the state attention_forward keeps for attention_backward:
// the logsumexp of each query row's scaled scores, (B, NH, T).
inline int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) { return B * NH * Tn; }

// Where the heads lie. q: (B, T) rows of stride q_ld, head h at channel
// h * head_dim; k and v: rows of stride kv_ld, kv head g at g * head_dim;
// out: (B, T) rows of stride out_ld, laid out as q. Gradients share the
// layout of what they are the gradient of. Scores are scaled by
// 1 / sqrt(head_dim).
struct AttentionShape {
  int64_t B = 0, Tn = 0, NH = 0, NKV = 0, head_dim = 0;
  int64_t q_ld = 0, kv_ld = 0, out_ld = 0;
};

// lse (B, NH, T): the state above. Parallel over (batch, head, query block).
// For T = float the row work (softmax, exponentials, row sums) runs on
// `isa`, with the same bits on every ISA (tests compare them).
template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                       const AttentionShape& shape, VectorIsa isa = vector_isa());

// dq, dk and dv are overwritten (only each head's head_dim channels of each
// row) from dout, the forward's inputs, its output and its state. Parallel
// over (batch, key/value head); a group's query heads add into their
// shared dk and dv in head order.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const AttentionShape& shape,
                        VectorIsa isa = vector_isa());

}  // namespace dscore::transformer::cpu
