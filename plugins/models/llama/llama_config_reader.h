// The llama model's "model" section, read and checked: each unsupported or
// inconsistent setting is an error that names it.
#pragma once

#include <dscore/cpp/plugin.hpp>

#include <string>

#include "llama_config.h"

namespace dscore::llama {

LlamaConfig read_config(const sdk::Params& params);

// What a source of hyperparameters (the model section, or a Hugging Face
// config.json in llama_hf.h) gives before the checks: the values as
// written, -1 for "derive it" where LlamaConfig has no such state.
struct LlamaSettings {
  LlamaConfig config;
  int64_t num_key_value_heads = -1;  // -1 = num_attention_heads
  int64_t head_dim = -1;             // -1 = hidden_size / num_attention_heads
  std::string hidden_act = "silu";
  bool biases = false;       // attention_bias or mlp_bias
  std::string rope_scaling;  // rope_scaling's JSON object; "" = none
  // "llama", "mixtral", "qwen3", "qwen3_moe" (transformers' model_type);
  // "auto": mixtral with experts, else llama.
  std::string architecture = "auto";
  std::string mlp_only_layers;  // a JSON array of block indices; "" = none
  double router_jitter_noise = 0;
  int64_t sliding_window = -1;  // Mistral/Mixtral's attention window; -1 = none
};

// The checked configuration: `settings` plus the model section's run
// options (block_size, device, cuda_dtype, activation checkpointing).
LlamaConfig finish_config(LlamaSettings settings, const sdk::Params& params);

}  // namespace dscore::llama
