// The GPT model's hyperparameters (the config's "model" section) and the
// sizes derived from them.
#pragma once

#include <cstdint>
#include <string>

#include "../transformer_common/moe/gating.h"
#include "../transformer_common/sequence_parallel.h"

namespace dscore::gpt {

struct GptConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t block_size = 1024;  // T: positions, and tokens per sample (+1 for the last target)
  int64_t vocab_size = 50257;
  // Rows of the position embedding wpe; 0 = block_size. A Hugging Face
  // GPT-2 keeps its n_positions rows when trained on shorter samples.
  int64_t n_positions = 0;
  // Blocks (the first n) whose activations are recomputed in backward
  // instead of kept (activation checkpointing); 0 = none.
  int64_t checkpoint_blocks = 0;
  std::string device = "cpu";       // cpu | cuda
  std::string cuda_dtype = "bf16";  // bf16 | fp32: activations and matmul inputs on CUDA
  // Tensor parallelism (Megatron's split, as DeepSpeed's AutoTP makes it):
  // this rank is part tp_rank of tp_size (gpt_params.cc says which part of
  // each tensor it holds).
  int64_t tp_size = 1;
  int64_t tp_rank = 0;
  // Ulysses sequence parallelism: this rank computes the token-wise layers
  // on slice sp_rank of sp_size of every sample, and attention on the whole
  // sequence for its share of the heads (transformer_common/sequence_parallel.h).
  int64_t sp_size = 1;
  int64_t sp_rank = 0;

  // Mixture of Experts (DeepSpeed-MoE, docs/moe.md): with moe.num_experts
  // > 0, block l's MLP is moe.num_experts GELU MLPs behind a gate when
  // (l + 1) % moe_every == 0; moe_loss_coeff * l_aux of each such block is
  // added to the loss; moe_residual: PR-MoE's dense MLP beside the experts,
  // mixed by a learned softmax coefficient.
  transformer::moe::GatingConfig moe = dense();
  int64_t moe_every = 2;
  double moe_loss_coeff = 0.01;
  bool moe_residual = false;
  // Expert parallelism: each MoE block's experts spread over ep_size
  // ranks, this one holding experts [ep_rank E / ep_size, (ep_rank + 1) E /
  // ep_size) (transformer_common/moe/expert_exchange.h moves the tokens).
  int64_t ep_size = 1;
  int64_t ep_rank = 0;

  static transformer::moe::GatingConfig dense() {
    transformer::moe::GatingConfig c;
    c.num_experts = 0;
    return c;
  }
  bool has_moe() const { return moe.num_experts > 0; }
  bool moe_block(int64_t l) const { return has_moe() && (l + 1) % moe_every == 0; }
  // The experts this rank holds, and the first's number.
  int64_t local_experts() const { return moe.num_experts / ep_size; }
  int64_t first_expert() const { return ep_rank * local_experts(); }

  int64_t head_size() const { return n_embd / n_head; }
  // This rank's share of the heads, the attention width (q, k and v each)
  // and the MLP's hidden width.
  int64_t local_heads() const { return n_head / tp_size; }
  int64_t local_width() const { return n_embd / tp_size; }
  int64_t local_hidden() const { return 4 * n_embd / tp_size; }
  transformer::SequenceSlice sequence() const { return {sp_size, sp_rank, block_size}; }
  // The tokens of each sample this rank's token-wise layers compute.
  int64_t local_tokens() const { return block_size / sp_size; }
  int64_t positions() const { return n_positions > 0 ? n_positions : block_size; }
  // Layers: 0 = embeddings (wte, wpe; the tied LM head uses wte), 1..n_layer
  // = blocks, n_layer + 1 = the final LayerNorm.
  int64_t layer_count() const { return n_layer + 2; }
  int64_t final_layer() const { return n_layer + 1; }
  static constexpr int64_t kParamsPerBlock = 12;
};

}  // namespace dscore::gpt
