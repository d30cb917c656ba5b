#include "llama_params.h"

#include <dscore/cpp/counter_rng.hpp>

#include <string>

namespace dscore::llama {

LlamaParams::LlamaParams(const LlamaConfig& config, uint64_t seed) : config_(config), seed_(seed) {
  const int64_t C = config.hidden_size, V = config.vocab_size;
  const int t = static_cast<int>(config.tp_size), r = static_cast<int>(config.tp_rank);
  // Megatron's split (tensor parallelism, tp_size > 1): q, k and v by heads
  // (rows), gate and up by rows, o_proj and down_proj by columns (their
  // input), the embedding and the LM head by vocabulary rows; the RMSNorm
  // weights replicated.
  const bool split = t > 1;
  const sdk::TensorSplit whole;
  const auto rows = [&](int64_t extent) {
    return split ? sdk::TensorSplit{0, 1, extent, r * (extent / t)} : whole;
  };
  const auto columns = [&](int64_t extent) {
    return split ? sdk::TensorSplit{1, 1, extent, r * (extent / t)} : whole;
  };
  const auto [vocab_first, vocab_rows] = sdk::even_part(V, t, r);
  vocab_first_ = vocab_first;
  const sdk::TensorSplit vocab = split ? sdk::TensorSplit{0, 1, V, vocab_first} : whole;
  const int64_t I = config.local_intermediate(), Q = config.local_q_dim(),
                KV = config.local_kv_dim();
  auto add = [&](std::string name, std::vector<int64_t> shape, const sdk::TensorSplit& part,
                 bool ones = false) { add_param(std::move(name), std::move(shape), part, ones); };
  table_.add_layer("model.embed_tokens");
  add("model.embed_tokens.weight", {vocab_rows, C}, vocab);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    table_.add_layer("model.layers." + std::to_string(l));
    add(h + "input_layernorm.weight", {C}, whole, true);
    add(h + "self_attn.q_proj.weight", {Q, C}, rows(config.q_dim()));
    add(h + "self_attn.k_proj.weight", {KV, C}, rows(config.kv_dim()));
    add(h + "self_attn.v_proj.weight", {KV, C}, rows(config.kv_dim()));
    add(h + "self_attn.o_proj.weight", {C, Q}, columns(config.q_dim()));
    add(h + "post_attention_layernorm.weight", {C}, whole, true);
    if (config.moe_block(l)) {  // no tensor parallelism (llama_config.cc)
      add_experts(h, config);
    } else {
      add(h + "mlp.gate_proj.weight", {I, C}, rows(config.intermediate_size));
      add(h + "mlp.up_proj.weight", {I, C}, rows(config.intermediate_size));
      add(h + "mlp.down_proj.weight", {C, I}, columns(config.intermediate_size));
    }
    if (config.qk_norm()) {  // Qwen3 (no tensor parallelism)
      add(h + "self_attn.q_norm.weight", {config.head_dim}, whole, true);
      add(h + "self_attn.k_norm.weight", {config.head_dim}, whole, true);
    }
    if (config.qkv_bias()) {  // Qwen2 (no tensor parallelism)
      add(h + "self_attn.q_proj.bias", {Q}, whole);
      add(h + "self_attn.k_proj.bias", {KV}, whole);
      add(h + "self_attn.v_proj.bias", {KV}, whole);
    }
  }
  table_.add_layer("model.norm");
  add("model.norm.weight", {C}, whole, true);
  if (!config.tie_word_embeddings) add("lm_head.weight", {vocab_rows, C}, vocab);
  table_.finish("tokens", config.block_size + 1, C);
  description_ = table_.description();
  if (config.tie_word_embeddings) {  // the LM head, in the final layer, reads embed_tokens
    tie_ = {sizeof(dscore_layer_tie), 0, static_cast<size_t>(config.final_layer())};
    tie_ptr_ = &tie_;
    description_.tie_count = 1;
    description_.ties = &tie_ptr_;
  }
}

// An MoE block's router and experts (llama_params.h), in the
// architecture's names: Mixtral's block_sparse_moe.experts.<e>.w1/w2/w3,
// Qwen's mlp.experts.<e>.gate_proj/down_proj/up_proj. Under expert
// parallelism this rank's experts only, each the whole tensor of one
// expert rank (DSCORE_PARAM_EXPERT), so a checkpoint holds every expert by
// name whatever the expert ranks.
void LlamaParams::add_experts(const std::string& h, const LlamaConfig& config) {
  const int64_t C = config.hidden_size, I = config.expert_width(), E = config.num_local_experts;
  const uint32_t expert_flag = config.ep_size > 1 ? DSCORE_PARAM_EXPERT : 0u;
  const bool mixtral = config.architecture == Architecture::kMixtral;
  const std::string m = h + (mixtral ? "block_sparse_moe." : "mlp.");
  const char* const names[3] = {mixtral ? "w1" : "gate_proj", mixtral ? "w2" : "down_proj",
                                mixtral ? "w3" : "up_proj"};
  const std::vector<int64_t> shapes[3] = {{I, C}, {C, I}, {I, C}};
  add_param(m + "gate.weight", {E, C});
  for (int64_t e = config.first_expert(); e < config.first_expert() + config.held_experts(); ++e)
    for (int w : {kW1, kW2, kW3})
      add_param(m + "experts." + std::to_string(e) + "." + names[w] + ".weight", shapes[w], {},
                false, expert_flag);
  if (const int64_t S = config.shared_expert_intermediate_size; S > 0) {  // Qwen2-MoE
    add_param(m + "shared_expert.gate_proj.weight", {S, C});
    add_param(m + "shared_expert.down_proj.weight", {C, S});
    add_param(m + "shared_expert.up_proj.weight", {S, C});
    add_param(m + "shared_expert_gate.weight", {1, C});
  }
}

void LlamaParams::init(size_t index, int64_t offset, int64_t count, float* out) const {
  if (ones_.at(index)) {
    for (int64_t k = 0; k < count; ++k) out[k] = 1.0f;
    return;
  }
  // Each element a function of its index in the whole tensor, so every
  // tensor-parallel size starts from the same model.
  const uint64_t key = sdk::hash_name(table_.name(index));
  sdk::for_each_whole_run(
      table_.param(index), offset, count, [&](int64_t local, int64_t whole, int64_t n) {
        for (int64_t k = 0; k < n; ++k)
          out[local - offset + k] =
              static_cast<float>(config_.initializer_range *
                                 sdk::normal_at(seed_, key, static_cast<uint64_t>(whole + k)));
      });
}

}  // namespace dscore::llama
