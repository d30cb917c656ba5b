#include "llama_params.h"

#include <dscore/cpp/counter_rng.hpp>

#include <string>

namespace dscore::llama {

LlamaParams::LlamaParams(const LlamaConfig& config, uint64_t seed) : config_(config), seed_(seed) {
  const int64_t C = config.hidden_size, V = config.vocab_size, I = config.intermediate_size;
  const int64_t Q = config.q_dim(), KV = config.kv_dim();
  auto add = [&](std::string name, std::vector<int64_t> shape, bool ones = false) {
    table_.add_param(std::move(name), std::move(shape));
    ones_.push_back(ones);
  };
  table_.add_layer("model.embed_tokens");
  add("model.embed_tokens.weight", {V, C});
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    table_.add_layer("model.layers." + std::to_string(l));
    add(h + "input_layernorm.weight", {C}, true);
    add(h + "self_attn.q_proj.weight", {Q, C});
    add(h + "self_attn.k_proj.weight", {KV, C});
    add(h + "self_attn.v_proj.weight", {KV, C});
    add(h + "self_attn.o_proj.weight", {C, Q});
    add(h + "post_attention_layernorm.weight", {C}, true);
    add(h + "mlp.gate_proj.weight", {I, C});
    add(h + "mlp.up_proj.weight", {I, C});
    add(h + "mlp.down_proj.weight", {C, I});
  }
  table_.add_layer("model.norm");
  add("model.norm.weight", {C}, true);
  if (!config.tie_word_embeddings) add("lm_head.weight", {V, C});
  table_.finish("tokens", config.block_size + 1, C);
  description_ = table_.description();
  if (config.tie_word_embeddings) {  // the LM head, in the final layer, reads embed_tokens
    tie_ = {sizeof(dscore_layer_tie), 0, static_cast<size_t>(config.final_layer())};
    tie_ptr_ = &tie_;
    description_.tie_count = 1;
    description_.ties = &tie_ptr_;
  }
}

void LlamaParams::init(size_t index, int64_t offset, int64_t count, float* out) const {
  if (ones_.at(index)) {
    for (int64_t k = 0; k < count; ++k) out[k] = 1.0f;
    return;
  }
  const uint64_t key = sdk::hash_name(table_.name(index));
  for (int64_t k = 0; k < count; ++k)
    out[k] = static_cast<float>(config_.initializer_range *
                                sdk::normal_at(seed_, key, static_cast<uint64_t>(offset + k)));
}

}  // namespace dscore::llama
