// The llama model's hyperparameters (the config's "model" section, named as
// transformers' LlamaConfig) and the sizes derived from them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../transformer_common/moe/gating.h"
#include "../transformer_common/sequence_parallel.h"

namespace dscore::llama {

// rope_scaling: none, or Llama 3's ("rope_type": "llama3"), which divides
// the low frequencies by `factor` and blends the middle ones.
struct RopeScaling {
  bool llama3 = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

enum class Architecture { kLlama, kMixtral, kQwen2, kQwen2Moe, kQwen3, kQwen3Moe };

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;         // C
  int64_t intermediate_size = 11008;  // I: the MLP's width
  int64_t num_hidden_layers = 32;     // L
  int64_t num_attention_heads = 32;   // NH
  int64_t num_key_value_heads = 32;   // NKV: NH % NKV == 0 (grouped-query attention)
  int64_t head_dim = 128;             // hd
  int64_t max_position_embeddings = 2048;
  int64_t block_size = 1024;  // T: positions per sample (each sample is T + 1 tokens)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  // Blocks (the first n) whose activations are recomputed in backward; 0 = none.
  int64_t checkpoint_blocks = 0;
  // The transformers architecture: its parameter names and config.json.
  // Qwen2's q, k and v projections have biases; Qwen3's attention
  // normalises each head's query and key (q_norm, k_norm: RMSNorm over
  // head_dim) before the rotary embedding.
  Architecture architecture = Architecture::kLlama;
  // Mixture of Experts (docs/moe.md): with num_local_experts > 0, block l
  // (from 0) is an MoE block when (l + 1) % decoder_sparse_step == 0 and l
  // is not in mlp_only_layers (Mixtral: every block): its MLP is that many
  // SwiGLU experts of expert_width() behind a router sending each token to
  // its num_experts_per_tok most probable experts, every route kept
  // (dropless), weighted by their softmax probabilities (renormalised over
  // the k with norm_topk_prob: Mixtral always). With output_router_logits
  // the loss adds router_aux_loss_coef times transformers'
  // load_balancing_loss_func over all MoE blocks.
  int64_t num_local_experts = 0;
  int64_t num_experts_per_tok = 2;
  int64_t moe_intermediate_size = 0;  // 0: intermediate_size (Mixtral)
  // Qwen2-MoE: beside the experts, a SwiGLU MLP of this width every token
  // goes through, scaled by sigmoid(x shared_expert_gate); 0: none.
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  std::string device = "cpu";       // cpu | cuda
  std::string cuda_dtype = "bf16";  // bf16 | fp32: activations and matmul inputs on CUDA

  // Tensor parallelism (Megatron's split, as DeepSpeed's AutoTP makes it):
  // this rank is part tp_rank of tp_size (llama_params.cc says which part
  // of each tensor it holds).
  int64_t tp_size = 1;
  int64_t tp_rank = 0;
  // Ulysses sequence parallelism: this rank computes the token-wise layers
  // (RoPE at its slice's positions) on slice sp_rank of sp_size of every
  // sample, and attention on the whole sequence for its share of the query
  // and key/value heads (transformer_common/sequence_parallel.h).
  int64_t sp_size = 1;
  int64_t sp_rank = 0;
  // Expert parallelism: each MoE block's experts spread over ep_size ranks,
  // this one holding experts [first_expert(), + held_experts()) as whole
  // tensors in their transformers names (llama_params.cc;
  // transformer_common/moe/expert_exchange.h moves the tokens).
  int64_t ep_size = 1;
  int64_t ep_rank = 0;

  bool qk_norm() const {
    return architecture == Architecture::kQwen3 || architecture == Architecture::kQwen3Moe;
  }
  bool qkv_bias() const {
    return architecture == Architecture::kQwen2 || architecture == Architecture::kQwen2Moe;
  }
  // A block's parameters after its MLP: q_norm and k_norm, or the q, k
  // and v biases.
  int extra_attention_params() const { return qk_norm() ? 2 : qkv_bias() ? 3 : 0; }
  bool moe_architecture() const {
    return architecture == Architecture::kMixtral || architecture == Architecture::kQwen2Moe ||
           architecture == Architecture::kQwen3Moe;
  }
  bool has_moe() const { return num_local_experts > 0; }
  bool moe_block(int64_t block) const {
    return has_moe() && (block + 1) % decoder_sparse_step == 0 &&
           std::find(mlp_only_layers.begin(), mlp_only_layers.end(), block) ==
               mlp_only_layers.end();
  }
  bool every_block_moe() const {
    for (int64_t l = 0; l < num_hidden_layers; ++l)
      if (!moe_block(l)) return false;
    return true;
  }
  int64_t held_experts() const { return num_local_experts / ep_size; }
  int64_t first_expert() const { return ep_rank * held_experts(); }
  int64_t expert_width() const {
    return moe_intermediate_size > 0 ? moe_intermediate_size : intermediate_size;
  }
  transformer::moe::GatingConfig gating() const {
    transformer::moe::GatingConfig g;
    g.router = transformer::moe::Router::kDroplessTopK;
    g.num_experts = num_local_experts;
    g.k = num_experts_per_tok;
    g.norm_topk_prob = norm_topk_prob;
    return g;
  }

  int64_t q_dim() const { return num_attention_heads * head_dim; }   // Q
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // KV
  // This rank's share of the query and key/value heads, their widths and
  // the MLP's (all of them without tensor parallelism).
  int64_t local_heads() const { return num_attention_heads / tp_size; }
  int64_t local_kv_heads() const { return num_key_value_heads / tp_size; }
  int64_t local_q_dim() const { return q_dim() / tp_size; }
  int64_t local_kv_dim() const { return kv_dim() / tp_size; }
  int64_t local_intermediate() const { return intermediate_size / tp_size; }
  transformer::SequenceSlice sequence() const { return {sp_size, sp_rank, block_size}; }
  // The tokens of each sample this rank's token-wise layers compute.
  int64_t local_tokens() const { return block_size / sp_size; }
  // Layers: 0 = embeddings (model.embed_tokens; also the LM head when tied),
  // 1..L = blocks, L + 1 = the final RMSNorm (and lm_head when untied).
  int64_t layer_count() const { return num_hidden_layers + 2; }
  int64_t final_layer() const { return num_hidden_layers + 1; }
};

}  // namespace dscore::llama
