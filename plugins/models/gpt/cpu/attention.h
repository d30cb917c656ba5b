// Causal multi-head self-attention of the CPU backend, tiled (flash-style):
// the T x T probabilities never exist. Forward streams key blocks past each
// block of query rows with an online softmax and keeps only each row's
// logsumexp; backward recomputes the probabilities tile by tile from q, k
// and that logsumexp. Fixed tiles and fixed task boundaries make every
// result independent of the thread count. T = float (the plugin) and
// T = double (the finite-difference gradient checks).
#pragma once

#include <cstdint>

namespace dscore::gpt::cpu {

// Rows of queries and keys per tile (see docs/gpt.md for the measurement).
constexpr int64_t kAttentionQueryBlock = 64;
constexpr int64_t kAttentionKeyBlock = 64;

// Elements of the state attention_forward keeps for attention_backward:
// the logsumexp of each query row's scaled scores, (B, NH, T).
inline int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) { return B * NH * Tn; }

// qkv (B, T, 3C) = [q | k | v], heads of C / NH channels; out (B, T, C);
// lse (B, NH, T) the state above. Parallel over (batch, head, query block).
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t NH);

// dqkv (B, T, 3C) is overwritten from dout (B, T, C), the forward's inputs
// qkv, its output out and its state lse. Parallel over (batch, head).
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                        int64_t Tn, int64_t C, int64_t NH);

}  // namespace dscore::gpt::cpu
