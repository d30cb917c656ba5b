// The size of every activation buffer LlamaRunner (runner.h) allocates for
// a micro-batch of B samples, in elements, computed in one place, and the
// buffers themselves: the runner allocates from it, and the declared
// activation memory adds it up (through the counting backend). The attention state is the backend's
// choice (attention_state_elements), so it is passed in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "llama_config.h"

namespace dscore::llama {

struct ActivationElements {
  // Per kept block, in Scalar (N = B * T rows; C, Q, KV, I as llama_config.h).
  struct Block {
    int64_t ln1 = 0;               // (N, C) input_layernorm's output
    int64_t q = 0;                 // (N, Q) after RoPE
    int64_t k = 0, v = 0;          // (N, KV) each; k after RoPE
    int64_t atty = 0;              // (N, Q) attention output, before o_proj
    int64_t attention_state = 0;   // the backend's attention_state_elements(B, T, NH)
    int64_t x2 = 0;                // (N, C) residual after attention
    int64_t ln2 = 0;               // (N, C) post_attention_layernorm's output
    int64_t gate = 0, up = 0;      // (N, I) each
    int64_t swiglu = 0;            // (N, I) silu(gate) * up, down_proj's input
    int64_t heads_out = 0;         // sequence parallelism: (N, Q) attention output, heads layout
    int64_t q_pre = 0, k_pre = 0;  // Qwen3's q_norm, k_norm: their inputs, (N, Q) and (N, KV)
    int64_t stat = 0;              // (N) each of rstd1, rstd2, in Stat
    int64_t head_stat = 0;         // Qwen3: (N, NH + NKV) q_norm's and k_norm's rstd, in Stat
    int64_t scalars() const {
      return ln1 + q + k + v + atty + attention_state + x2 + ln2 + gate + up + swiglu + heads_out +
             q_pre + k_pre;
    }
  };
  Block block;
  // Blocks with their own activations: those not checkpointed, plus one
  // set shared by the checkpointed blocks (recomputed there in turn).
  int64_t kept_blocks = 0;
  // Shared by all blocks, in Scalar.
  int64_t resid = 0;  // (blocks + 1, N, C): every block's input, then the last output
  int64_t lnf = 0, dlnf = 0, dresid = 0;  // (N, C) each
  int64_t lnf_stat = 0;                   // (N) rstd, in Stat
  int64_t rope = 0;                       // (T, hd / 2) each of cos, sin
  // Backward scratch, in Scalar.
  int64_t dgate = 0, dup = 0;      // (N, I) each; dgate also holds d(swiglu) in fp32 form
  int64_t dln = 0;                 // (N, C)
  int64_t datty = 0, dq = 0;       // (N, Q) each
  int64_t dk = 0, dv = 0;          // (N, KV) each
  int64_t heads_grad = 0;          // sequence parallelism: (N, 2Q + 2KV), heads layout
  int64_t dq_pre = 0, dk_pre = 0;  // Qwen3: the gradients at q_norm's and k_norm's inputs
  int64_t tokens = 0;              // (N) each of inputs and targets, int32

  int64_t scalars() const {
    return kept_blocks * block.scalars() + resid + lnf + dlnf + dresid + 2 * rope + dgate + dup +
           dln + datty + dq + dk + dv + heads_grad + dq_pre + dk_pre;
  }
  int64_t stats() const { return kept_blocks * (2 * block.stat + block.head_stat) + lnf_stat; }
  int64_t bytes(size_t scalar_bytes, size_t stat_bytes) const {
    return scalars() * static_cast<int64_t>(scalar_bytes) +
           stats() * static_cast<int64_t>(stat_bytes) + 2 * tokens * 4;
  }
};

// attention_state: the backend's attention_state_elements(B, block_size,
// local_heads() / sp_size).
// bf16_operands: the pass's linears read bf16 operands (the runner's fused
// block in bf16 layers), so the buffers that only ever hold one (ln1, ln2,
// swiglu) need half as many Scalar (fp32) elements.
// Blocks [lo, hi) (all of them by default): a pipeline stage's runner keeps
// only its own blocks' activations and their inputs.
inline ActivationElements activation_elements(const LlamaConfig& cfg, int64_t B,
                                              int64_t attention_state, bool bf16_operands = false,
                                              int64_t lo = 0, int64_t hi = -1) {
  if (hi < 0) hi = cfg.num_hidden_layers;
  // Under tensor parallelism the attention and MLP activations are this
  // rank's heads' and units' only.
  // Under sequence parallelism the token-wise activations are this rank's
  // slice of each sample's (N = B T / sp), and attention's (q, k, v and
  // its output, in the heads layout) the whole sequence's for 1 / sp of the
  // heads: as many elements.
  // A model whose blocks are all MoE blocks (Mixtral) keeps no dense MLP
  // activations: its MLP buffers are moe_mlp.h's.
  const bool dense_mlp = !cfg.every_block_moe();
  const int64_t N = B * cfg.local_tokens(), C = cfg.hidden_size,
                I = dense_mlp ? cfg.local_intermediate() : 0;
  const bool sequence_split = cfg.sequence().split();
  const int64_t Q = cfg.local_q_dim(), KV = cfg.local_kv_dim();
  const auto operand = [bf16_operands](int64_t n) { return bf16_operands ? (n + 1) / 2 : n; };
  ActivationElements e;
  e.block.ln1 = operand(N * C);
  e.block.q = N * Q;
  e.block.k = e.block.v = N * KV;
  e.block.atty = N * Q;
  e.block.attention_state = attention_state;
  e.block.x2 = N * C;
  e.block.ln2 = dense_mlp ? operand(N * C) : 0;
  e.block.gate = e.block.up = N * I;
  e.block.swiglu = operand(N * I);
  e.block.heads_out = sequence_split ? N * Q : 0;
  e.block.stat = N;
  if (cfg.qk_norm()) {
    e.block.q_pre = e.dq_pre = N * Q;
    e.block.k_pre = e.dk_pre = N * KV;
    e.block.head_stat = N * (cfg.local_heads() + cfg.local_kv_heads());
  }
  const int64_t checkpointed = std::max<int64_t>(0, std::min(hi, cfg.checkpoint_blocks) - lo);
  e.kept_blocks = (hi - lo) - checkpointed + (checkpointed > 0 ? 1 : 0);
  e.resid = (hi - lo + 1) * N * C;
  e.lnf = e.dlnf = e.dresid = N * C;
  e.lnf_stat = N;
  e.rope = cfg.block_size * (cfg.head_dim / 2);
  // bf16: gate_proj's and up_proj's output gradients as operands (the CPU
  // backend's mlp_backward hands down_proj's input gradient to SwiGLU's
  // backward in chunks, so d(swiglu) never lands in dgate).
  e.dgate = e.dup = operand(N * I);
  e.dln = N * C;
  e.datty = e.dq = N * Q;
  e.dk = e.dv = N * KV;
  e.heads_grad = sequence_split ? N * (2 * Q + 2 * KV) : 0;
  e.tokens = N;
  return e;
}

// The buffers of those sizes, from a backend (runner.h's Buffer<X>,
// alloc<X>(n)): what LlamaRunner keeps its activations in.
template <class Backend>
struct ActivationBuffers {
  using T = typename Backend::Scalar;
  using S = typename Backend::Stat;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;

  struct Block {
    // Under sequence parallelism q, k and v hold the heads layout, and
    // heads_out attention's output in it.
    Buffer<T> ln1, q, k, v, atty, attention_state, x2, ln2, gate, up, swiglu, heads_out;
    Buffer<T> q_pre, k_pre;  // Qwen3: q_norm's and k_norm's inputs
    Buffer<S> rstd1, rstd2, head_rstd;
  };
  Buffer<T> resid;  // (blocks + 1) x N x C: each kept block's input, then the last output
  Buffer<T> lnf, dlnf, dresid;
  Buffer<S> lnf_rstd;
  Buffer<T> rope_cos, rope_sin;  // (T, hd / 2)
  std::vector<Block> blocks;     // one per kept block, plus one shared by checkpointed blocks
  Buffer<T> dgate, dup, dln, datty, dq, dk, dv;  // backward scratch
  Buffer<T> heads_grad;      // sequence parallelism: attention's gradients in the heads layout
  Buffer<T> dq_pre, dk_pre;  // Qwen3: the gradients at q_norm's and k_norm's inputs

  static ActivationBuffers allocate(Backend& backend, const ActivationElements& e) {
    const auto scalars = [&](int64_t n) { return backend.template alloc<T>(n); };
    const auto stats = [&](int64_t n) { return backend.template alloc<S>(n); };
    ActivationBuffers a;
    a.resid = scalars(e.resid);
    a.lnf = scalars(e.lnf);
    a.dlnf = scalars(e.dlnf);
    a.dresid = scalars(e.dresid);
    a.lnf_rstd = stats(e.lnf_stat);
    a.rope_cos = scalars(e.rope);
    a.rope_sin = scalars(e.rope);
    a.blocks.resize(static_cast<size_t>(e.kept_blocks));
    for (Block& b : a.blocks) {
      const ActivationElements::Block& n = e.block;
      b.ln1 = scalars(n.ln1);
      b.q = scalars(n.q);
      b.k = scalars(n.k);
      b.v = scalars(n.v);
      b.atty = scalars(n.atty);
      b.attention_state = scalars(n.attention_state);
      b.x2 = scalars(n.x2);
      b.ln2 = scalars(n.ln2);
      b.gate = scalars(n.gate);
      b.up = scalars(n.up);
      b.swiglu = scalars(n.swiglu);
      b.heads_out = scalars(n.heads_out);
      b.rstd1 = stats(n.stat);
      b.rstd2 = stats(n.stat);
      b.q_pre = scalars(n.q_pre);
      b.k_pre = scalars(n.k_pre);
      b.head_rstd = stats(n.head_stat);
    }
    a.dgate = scalars(e.dgate);
    a.dup = scalars(e.dup);
    a.dln = scalars(e.dln);
    a.datty = scalars(e.datty);
    a.dq = scalars(e.dq);
    a.dk = scalars(e.dk);
    a.dv = scalars(e.dv);
    a.heads_grad = scalars(e.heads_grad);
    a.dq_pre = scalars(e.dq_pre);
    a.dk_pre = scalars(e.dk_pre);
    return a;
  }
};

}  // namespace dscore::llama
