#include "llama_hf.h"

#include <dscore/cpp/tensor_split.hpp>

#include <dscore/cpp/plugin.hpp>

#include <cstdio>
#include <utility>
#include <vector>

#include "../hf_common/hf_config.h"

namespace dscore::llama {
namespace {

sdk::Error refused(const hf::HfConfig& c, const std::string& what) {
  return sdk::Error(DSCORE_INVALID_ARGUMENT, c.path() + ": " + what);
}

// transformers' class and model_type of each architecture.
std::pair<const char*, const char*> architecture_names(Architecture a) {
  switch (a) {
    case Architecture::kMixtral:
      return {"MixtralForCausalLM", "mixtral"};
    case Architecture::kQwen2:
      return {"Qwen2ForCausalLM", "qwen2"};
    case Architecture::kQwen2Moe:
      return {"Qwen2MoeForCausalLM", "qwen2_moe"};
    case Architecture::kQwen3:
      return {"Qwen3ForCausalLM", "qwen3"};
    case Architecture::kQwen3Moe:
      return {"Qwen3MoeForCausalLM", "qwen3_moe"};
    case Architecture::kLlama:
      break;
  }
  return {"LlamaForCausalLM", "llama"};
}

std::string number_text(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

// The whole tensor's shape (a tensor-parallel rank holds a part of it).
std::vector<int64_t> shape_of(const dscore_model_param& p) { return sdk::whole_shape(p); }

}  // namespace

LlamaSettings llama_hf_settings(const hf::HfConfig& c) {
  const std::string type = c.string("model_type", "");
  if (type != "llama" && type != "mixtral" && type != "qwen2" && type != "qwen2_moe" &&
      type != "qwen3" && type != "qwen3_moe")
    throw refused(c, "model_type \"" + type +
                         "\" is not a Llama; model type \"llama\" reads the folders of "
                         "transformers' LlamaForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, "
                         "Qwen2MoeForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM "
                         "(model_type \"llama\", \"mixtral\", \"qwen2\", \"qwen2_moe\", "
                         "\"qwen3\" or \"qwen3_moe\")");
  LlamaSettings s;
  s.architecture = type;
  LlamaConfig& m = s.config;
  m.vocab_size = c.integer("vocab_size");
  m.hidden_size = c.integer("hidden_size");
  m.intermediate_size = c.integer("intermediate_size");
  m.num_hidden_layers = c.integer("num_hidden_layers");
  m.num_attention_heads = c.integer("num_attention_heads");
  s.num_key_value_heads = c.integer("num_key_value_heads", m.num_attention_heads);
  s.head_dim = c.integer("head_dim", -1);
  m.max_position_embeddings = c.integer("max_position_embeddings", 2048);
  m.rms_norm_eps = c.number("rms_norm_eps", 1e-6);
  m.tie_word_embeddings = c.boolean("tie_word_embeddings", false);
  m.initializer_range = c.number("initializer_range", 0.02);
  s.hidden_act = c.string("hidden_act", "silu");
  s.biases = c.boolean("attention_bias", false) || c.boolean("mlp_bias", false);
  // Qwen2's q, k and v biases are the architecture's, not attention_bias
  // (which its config does not have); Qwen2-MoE's may be switched off.
  if (type == "qwen2_moe" && !c.boolean("qkv_bias", true))
    throw refused(c, "qkv_bias false is not implemented (Qwen2-MoE's q, k and v biases are)");
  if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe") {
    // transformers 5 saves Qwen3-MoE's num_experts as num_local_experts.
    m.num_local_experts =
        c.has("num_local_experts") ? c.integer("num_local_experts") : c.integer("num_experts");
    m.num_experts_per_tok = c.integer("num_experts_per_tok", 2);
    m.router_aux_loss_coef = c.number("router_aux_loss_coef", 0.001);
    m.output_router_logits = c.boolean("output_router_logits", false);
    s.router_jitter_noise = c.number("router_jitter_noise", 0.0);
  }
  if (type == "qwen2_moe")
    m.shared_expert_intermediate_size = c.integer("shared_expert_intermediate_size", 0);
  if (type == "qwen2_moe" || type == "qwen3_moe") {
    m.moe_intermediate_size = c.integer("moe_intermediate_size");
    m.norm_topk_prob = c.boolean("norm_topk_prob", false);
    m.decoder_sparse_step = c.integer("decoder_sparse_step", 1);
    s.mlp_only_layers = c.json("mlp_only_layers");
  }
  // Mistral's and Qwen's sliding-window attention: a window as long as
  // the sequences trained on changes nothing, a shorter one is not computed.
  if (c.has("sliding_window") && (type == "mixtral" || c.boolean("use_sliding_window", false)))
    s.sliding_window = c.integer("sliding_window");
  if (c.number("attention_dropout", 0.0) != 0.0)
    throw refused(c, "attention_dropout " + number_text(c.number("attention_dropout")) +
                         " is not implemented (the llama model has no dropout); set it to 0.0");
  // transformers 5 keeps rope_theta and the scaling in "rope_parameters";
  // earlier files have top-level "rope_theta" and "rope_scaling".
  const std::string parameters = c.json("rope_parameters");
  double theta = 10000.0;
  if (!parameters.empty()) {
    const hf::HfConfig rope(parameters, c.path() + " (rope_parameters)");
    theta = rope.number("rope_theta", theta);
    s.rope_scaling = parameters;
  } else {
    s.rope_scaling = c.json("rope_scaling");
  }
  m.rope_theta = c.number("rope_theta", theta);
  return s;
}

LlamaWeights::LlamaWeights(std::shared_ptr<const hf::HfFolder> folder,
                           const dscore_model_description& d)
    : folder_(std::move(folder)) {
  for (size_t l = 0; l < d.layer_count; ++l)
    for (size_t i = 0; i < d.layers[l]->param_count; ++i) {
      const dscore_model_param& p = *d.layers[l]->params[i];
      folder_->tensor(p.name, shape_of(p));  // throws, naming what is wrong
    }
}

void LlamaWeights::read(const dscore_model_param& p, int64_t offset, int64_t count,
                        float* out) const {
  folder_->read(folder_->tensor(p.name, shape_of(p)), offset, count, out);
}

std::string llama_config_json(const LlamaConfig& m, dscore_dtype dtype, const hf::HfConfig* base) {
  const char* dtype_name = dtype == DSCORE_DTYPE_BF16  ? "bfloat16"
                           : dtype == DSCORE_DTYPE_F16 ? "float16"
                                                       : "float32";
  auto text = [](int64_t v) { return std::to_string(v); };
  const bool moe = m.has_moe();
  const auto [architecture, model_type] = architecture_names(m.architecture);
  std::vector<std::pair<std::string, std::string>> values = {
      {"architectures", "[" + hf::json_string(architecture) + "]"},
      {"model_type", hf::json_string(model_type)},
      {"vocab_size", text(m.vocab_size)},
      {"hidden_size", text(m.hidden_size)},
      {"intermediate_size", text(m.intermediate_size)},
      {"num_hidden_layers", text(m.num_hidden_layers)},
      {"num_attention_heads", text(m.num_attention_heads)},
      {"num_key_value_heads", text(m.num_key_value_heads)},
      {"head_dim", text(m.head_dim)},
      {"max_position_embeddings", text(m.max_position_embeddings)},
      {"rms_norm_eps", number_text(m.rms_norm_eps)},
      {"tie_word_embeddings", m.tie_word_embeddings ? "true" : "false"},
      {"hidden_act", "\"silu\""},
      {"dtype", hf::json_string(dtype_name)},
  };
  if (m.architecture == Architecture::kQwen2Moe) {
    values.emplace_back("shared_expert_intermediate_size", text(m.shared_expert_intermediate_size));
    values.emplace_back("qkv_bias", "true");
  }
  if (m.architecture == Architecture::kQwen2Moe || m.architecture == Architecture::kQwen3Moe) {
    values.emplace_back("num_experts", text(m.num_local_experts));
    values.emplace_back("moe_intermediate_size", text(m.expert_width()));
    values.emplace_back("norm_topk_prob", m.norm_topk_prob ? "true" : "false");
    values.emplace_back("decoder_sparse_step", text(m.decoder_sparse_step));
    std::string layers;
    for (int64_t l : m.mlp_only_layers) layers += (layers.empty() ? "" : ", ") + text(l);
    values.emplace_back("mlp_only_layers", "[" + layers + "]");
  }
  if (m.extra_attention_params() > 0) values.emplace_back("use_sliding_window", "false");
  if (moe) {
    if (m.architecture == Architecture::kMixtral)
      values.emplace_back("num_local_experts", text(m.num_local_experts));
    values.emplace_back("num_experts_per_tok", text(m.num_experts_per_tok));
    values.emplace_back("router_aux_loss_coef", number_text(m.router_aux_loss_coef));
    values.emplace_back("output_router_logits", m.output_router_logits ? "true" : "false");
    values.emplace_back("router_jitter_noise", "0.0");
  }
  if (m.qk_norm() || m.architecture == Architecture::kLlama)
    values.emplace_back("attention_bias", "false");
  if (m.architecture == Architecture::kLlama) values.emplace_back("mlp_bias", "false");
  // transformers 4.56 renamed torch_dtype to dtype; keep an older file's key true.
  if (base != nullptr && base->has("torch_dtype"))
    values.emplace_back("torch_dtype", hf::json_string(dtype_name));
  if (base == nullptr) {
    // A model trained from scratch: its rotary settings in the legacy keys,
    // which transformers reads in every release.
    values.emplace_back("rope_theta", number_text(m.rope_theta));
    const RopeScaling& r = m.rope_scaling;
    values.emplace_back("rope_scaling",
                        !r.llama3
                            ? "null"
                            : "{\"rope_type\": \"llama3\", \"factor\": " + number_text(r.factor) +
                                  ", \"low_freq_factor\": " + number_text(r.low_freq_factor) +
                                  ", \"high_freq_factor\": " + number_text(r.high_freq_factor) +
                                  ", \"original_max_position_embeddings\": " +
                                  text(r.original_max_position_embeddings) + "}");
    values.emplace_back("initializer_range", number_text(m.initializer_range));
    values.emplace_back("attention_dropout", "0.0");
    if (m.architecture != Architecture::kLlama) values.emplace_back("sliding_window", "null");
  }
  return hf::write_config_json(base != nullptr ? base->text() : "", values);
}

}  // namespace dscore::llama
