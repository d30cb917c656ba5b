// What the decoder models' CUDA backend (cuda/cuda_backend.h) allocates in
// GPU memory for a pass, beside the runner's own buffers: its scratch, the
// cuBLAS workspace and one acquired layer's copies. The backend sizes its
// allocations with these functions, and the models declare their GPU
// activations (model.h activation_bytes) with them, so the two cannot drift
// apart. Plain C++ without CUDA or SDK headers, so the kernels' .cu files
// include it too, and the plugins, which link no CUDA library, declare
// without loading their CUDA module or making a context (`dscore plan` on
// a machine without a GPU).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

namespace dscore::transformer::cuda_memory {

// The cuBLAS workspace each model's context allocates (cuBLAS's advice for Hopper).
inline constexpr uint64_t kCublasWorkspaceBytes = uint64_t{32} << 20;

// The LM head's logits come in chunks of rows, about this many fp32 logits
// (128 MiB) at a time, with a row pitch of V rounded up to 64 elements.
inline constexpr int64_t kLogitsPerChunk = int64_t{1} << 25;
inline int64_t logits_pitch(int64_t V) { return (V + 63) / 64 * 64; }
inline int64_t logits_rows_per_chunk(int64_t N, int64_t V) {
  return std::clamp<int64_t>(kLogitsPerChunk / std::max<int64_t>(logits_pitch(V), 1), 16,
                             std::max<int64_t>(N, 16));
}

// Column sums over N rows (LayerNorm and bias gradients) in a fixed order:
// partial sums of chunks of rows, column_sum_partials(N, C) floats.
inline int64_t column_sum_rows_per_chunk(int64_t N) {
  return std::max<int64_t>(64, (N + 511) / 512);
}
inline int64_t column_sum_partials(int64_t N, int64_t C) {
  const int64_t rows = column_sum_rows_per_chunk(N);
  return (N + rows - 1) / rows * 2 * C;
}

// The embedding backward's index of N token rows: each distinct token, where
// its rows start (one more), and the rows in token order.
inline int64_t embedding_index_elements(int64_t N) { return 3 * N + 1; }

// The attention a bf16 backend runs, named by DSCORE_CUDA_ATTENTION:
// "fused" (unset or empty: flash attention, keeping each query row's
// logsumexp) or "unfused" (cuBLAS products, keeping the T x T
// probabilities); nullopt for any other value. fp32 runs unfused always.
// pass_memory.h's attention_kernels_from_env() reads it.
enum class AttentionKernels { kFused, kUnfused };
inline std::optional<AttentionKernels> parse_attention_kernels(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "fused") == 0)
    return AttentionKernels::kFused;
  if (std::strcmp(value, "unfused") == 0) return AttentionKernels::kUnfused;
  return std::nullopt;
}

// The attention state the runner keeps per block, in elements of the
// backend's scalar: fused (bf16), each query row's fp32 logsumexp (two
// bf16 elements); unfused, the probabilities (B, NH, T, T).
inline int64_t fused_state_elements(int64_t B, int64_t Tn, int64_t NH) { return B * NH * Tn * 2; }
inline int64_t unfused_state_elements(int64_t B, int64_t Tn, int64_t NH) {
  return B * NH * Tn * Tn;
}

// A pass's shape as the backend's scratch depends on it.
struct PassShape {
  int64_t batch = 0;              // B
  int64_t block = 0;              // T
  int64_t heads = 0;              // NH (query heads)
  int64_t embd = 0;               // C, the LM head's input width
  int64_t vocab = 0;              // V
  int64_t widest_column_sum = 0;  // the widest LayerNorm or bias gradient's columns (0: none)
  int64_t largest_layer = 0;      // the most parameter elements one layer holds
};

// The scratch the backend keeps across passes, each slot grown to the
// pass's largest request (cuda_context.h Scratch), and the cuBLAS
// workspace, for scalars of `scalar_bytes` (4 fp32, 2 bf16). Views in
// device memory, as the engine lends them on a GPU: no upload staging.
inline uint64_t scratch_bytes(const PassShape& p, uint64_t scalar_bytes, bool fused_attention) {
  const auto u = [](int64_t n) { return static_cast<uint64_t>(n); };
  const int64_t N = p.batch * p.block;
  const int64_t logits = logits_rows_per_chunk(N, p.vocab) * logits_pitch(p.vocab);
  uint64_t bytes = kCublasWorkspaceBytes + u(logits) * 4 + u(N) * 8  // logits, row losses
                   + u(embedding_index_elements(N)) * 4 + u(p.batch * p.embd) * scalar_bytes;
  if (scalar_bytes != 4) bytes += u(logits) * scalar_bytes + u(p.vocab * p.embd) * 4;
  if (p.widest_column_sum > 0) bytes += u(column_sum_partials(N, p.widest_column_sum)) * 4;
  const int64_t scores = p.heads * p.block * p.block;
  bytes += fused_attention ? u(p.batch * p.heads * p.block) * 4  // the backward's row dots
                           : u(scores) * (4 + scalar_bytes);     // scores and their gradient
  return bytes;
}

// One acquired layer's device copies: its gradient accumulators always,
// and its parameters converted to the scalar unless the views are used in
// place (device views of the scalar's dtype).
inline uint64_t layer_copies_bytes(int64_t largest_layer, uint64_t scalar_bytes,
                                   bool params_in_place) {
  return static_cast<uint64_t>(largest_layer) * scalar_bytes * (params_in_place ? 1 : 2);
}

}  // namespace dscore::transformer::cuda_memory
