// The size of every activation buffer GptRunner (runner.h) allocates for a
// micro-batch of B samples, in elements, computed in one place: the runner
// allocates from it, and a memory estimate can add it up. The attention
// state is the backend's choice (attention_state_elements: the CPU keeps a
// logsumexp per query row, CUDA the T x T probabilities), so it is passed in.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpt_config.h"

namespace dscore::gpt {

struct ActivationElements {
  // Per kept block, in the backend's Scalar (N = B * T rows, C channels).
  struct Block {
    int64_t ln1 = 0;              // (N, C)
    int64_t qkv = 0;              // (N, 3C)
    int64_t atty = 0;             // (N, C) attention output, before the projection
    int64_t attention_state = 0;  // the backend's attention_state_elements(B, T, NH)
    int64_t x2 = 0;               // (N, C) residual after attention
    int64_t ln2 = 0;              // (N, C)
    int64_t fch = 0;              // (N, 4C)
    int64_t fch_gelu = 0;         // (N, 4C)
    int64_t heads_out = 0;        // sequence parallelism: (N, C) attention output, heads layout
    int64_t stat = 0;             // (N) each of mean1, rstd1, mean2, rstd2, in the backend's Stat
    int64_t scalars() const {
      return ln1 + qkv + atty + attention_state + x2 + ln2 + fch + fch_gelu + heads_out;
    }
  };
  Block block;
  // Blocks with their own activations: those not checkpointed, plus one
  // set shared by the checkpointed blocks (recomputed there in turn).
  int64_t kept_blocks = 0;
  // Shared by all blocks, in Scalar.
  int64_t resid = 0;  // (blocks + 1, N, C): every block's input, then the last output
  int64_t lnf = 0, dlnf = 0, dresid = 0;  // (N, C) each
  int64_t lnf_stat = 0;                   // (N) each of mean, rstd, in Stat
  // Backward scratch, in Scalar.
  int64_t dfch_gelu = 0, dfch = 0;  // (N, 4C) each
  int64_t dln = 0, datty = 0;       // (N, C) each
  int64_t dqkv = 0;                 // (N, 3C)
  int64_t heads_dqkv = 0;           // sequence parallelism: (N, 3C), heads layout
  int64_t tokens = 0;               // (N) each of inputs and targets, int32

  int64_t scalars() const {
    return kept_blocks * block.scalars() + resid + lnf + dlnf + dresid + dfch_gelu + dfch + dln +
           datty + dqkv + heads_dqkv;
  }
  int64_t stats() const { return kept_blocks * 4 * block.stat + 2 * lnf_stat; }
  // All of it, for Scalar and Stat of these sizes.
  int64_t bytes(size_t scalar_bytes, size_t stat_bytes) const {
    return scalars() * static_cast<int64_t>(scalar_bytes) +
           stats() * static_cast<int64_t>(stat_bytes) + 2 * tokens * 4;
  }
};

// attention_state: the backend's attention_state_elements(B, block_size,
// local_heads() / sp_size).
// bf16_operands: the pass's linears read bf16 operands (the runner's fused
// block in bf16 layers), so the buffers that only ever hold one (ln1, ln2,
// fch_gelu, dfch; qkv, which keeps attention's rounded heads) need half as
// many Scalar (fp32) elements, and dfch_gelu none (the CPU backend's
// mlp_backward hands the projection's input gradient to GELU's backward in
// chunks, gemm_bf16_consumed).
// Blocks [lo, hi) (all of them by default): a pipeline stage's runner keeps
// only its own blocks' activations and their inputs.
inline ActivationElements activation_elements(const GptConfig& cfg, int64_t B,
                                              int64_t attention_state, bool bf16_operands = false,
                                              int64_t lo = 0, int64_t hi = -1) {
  if (hi < 0) hi = cfg.n_layer;
  // Under sequence parallelism the token-wise activations are this rank's
  // slice of each sample's (N = B T / sp), and attention's the whole
  // sequence's for its share of the heads (as many elements): a.qkv holds
  // them whole in either form (not attention's rounded bf16 heads).
  const int64_t N = B * cfg.local_tokens(), C = cfg.n_embd;
  const bool sequence_split = cfg.sequence().split();
  // Under tensor parallelism the attention and MLP activations are this
  // rank's heads' and hidden units' only.
  const int64_t W = cfg.local_width(), H = cfg.local_hidden();
  const auto operand = [bf16_operands](int64_t n) { return bf16_operands ? (n + 1) / 2 : n; };
  ActivationElements e;
  e.block.ln1 = operand(N * C);
  e.block.qkv = sequence_split ? N * 3 * W : operand(N * 3 * W);  // bf16: rounded heads
  e.block.atty = N * W;
  e.block.attention_state = attention_state;
  e.block.x2 = N * C;
  e.block.ln2 = operand(N * C);
  e.block.fch = N * H;
  e.block.fch_gelu = operand(N * H);
  e.block.heads_out = sequence_split ? N * W : 0;
  e.block.stat = N;
  const int64_t checkpointed = std::max<int64_t>(0, std::min(hi, cfg.checkpoint_blocks) - lo);
  e.kept_blocks = (hi - lo) - checkpointed + (checkpointed > 0 ? 1 : 0);
  e.resid = (hi - lo + 1) * N * C;
  e.lnf = e.dlnf = e.dresid = N * C;
  e.lnf_stat = N;
  e.dfch_gelu = bf16_operands ? 0 : N * H;  // bf16: handed to GELU's backward in chunks
  e.dfch = operand(N * H);
  e.dln = N * C;
  e.datty = N * W;
  e.dqkv = N * 3 * W;
  e.heads_dqkv = sequence_split ? N * 3 * W : 0;
  e.tokens = N;
  return e;
}

}  // namespace dscore::gpt
