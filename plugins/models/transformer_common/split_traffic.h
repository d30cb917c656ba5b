// What a transformer split as the gpt and the llama split it (Megatron's
// tensor parallelism, Ulysses' sequence parallelism) moves in its own
// collectives per micro-batch through some of its layers (model.h
// collective_bytes), counted as their runners make the calls (runner.h of
// each): layer 0 the embedding, 1 .. blocks the blocks, blocks + 1 the
// final norm and the head.
#pragma once

#include <dscore/model.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dscore::transformer {

struct SplitTraffic {
  int64_t rows = 0;           // B x the slice's tokens: what token-wise layers run on
  int64_t embd = 0;           // C
  int64_t element_bytes = 4;  // the activations' scalar
  int64_t blocks = 0;
  int64_t checkpoint_blocks = 0;  // the first ones recompute their forward in backward
  int64_t tp_size = 1, sp_size = 1;
  // Ulysses: per block, the widths its forward sends from the token layout
  // to the heads layout (gpt: q|k|v packed; llama: q, k and v) and back
  // (the output); its backward sends the same widths the other way.
  std::vector<int64_t> to_heads, to_tokens;
  int64_t head_rows_per_block = 1;  // the vocab-parallel head's (cpu/linear.h lm_rows_per_block)
};

inline dscore_model_collectives split_collectives(const SplitTraffic& t,
                                                  const dscore_pipeline_stage& layers) {
  dscore_model_collectives c{};
  c.struct_size = sizeof c;
  // The stage's blocks [lo, hi) (0-based), and how many of them recompute.
  const int64_t lo = std::max<int64_t>(static_cast<int64_t>(layers.first_layer), 1) - 1;
  const int64_t hi = std::min<int64_t>(static_cast<int64_t>(layers.end_layer), t.blocks + 1) - 1;
  const uint64_t blocks = static_cast<uint64_t>(std::max<int64_t>(hi - lo, 0));
  const uint64_t recomputed =
      static_cast<uint64_t>(std::max<int64_t>(std::min(hi, t.checkpoint_blocks) - lo, 0));
  const uint64_t activation = static_cast<uint64_t>(t.rows * t.embd * t.element_bytes);
  if (t.tp_size > 1) {
    // Per block: the attention projection's and the MLP's partial sums in
    // forward, the two norms' input gradients in backward; a checkpointed
    // block's recompute sums the projection again (it stops before the MLP's).
    uint64_t calls = blocks * 4 + recomputed;
    uint64_t bytes = calls * activation;
    if (layers.first_layer == 0) {  // the vocab-parallel embedding's sum
      calls += 1;
      bytes += activation;
    }
    if (layers.end_layer == static_cast<size_t>(t.blocks) + 2) {
      // Per block of rows the rows' maxima, then their exponentials' sums
      // and target logits (fp64); then the input gradient's sum.
      for (int64_t r0 = 0; r0 < t.rows; r0 += t.head_rows_per_block) {
        const uint64_t rows = static_cast<uint64_t>(std::min(t.head_rows_per_block, t.rows - r0));
        calls += 2;
        bytes += 8 * rows + 16 * rows;
      }
      calls += 1;
      bytes += activation;
    }
    c.tensor_parallel_calls = calls;
    c.tensor_parallel_bytes = bytes;
  }
  if (t.sp_size > 1) {
    // Forward, backward and a checkpointed block's recompute (forward's).
    const uint64_t passes = 2 * blocks + recomputed;
    uint64_t width = 0;
    for (int64_t w : t.to_heads) width += static_cast<uint64_t>(w);
    for (int64_t w : t.to_tokens) width += static_cast<uint64_t>(w);
    c.sequence_parallel_calls = passes * (t.to_heads.size() + t.to_tokens.size());
    c.sequence_parallel_bytes = passes * width * static_cast<uint64_t>(t.rows * t.element_bytes);
  }
  return c;
}

}  // namespace dscore::transformer
