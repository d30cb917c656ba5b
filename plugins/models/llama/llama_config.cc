#include "llama_config_reader.h"

#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../transformer_common/sequence_parallel.h"
#include "../transformer_common/tensor_parallel.h"

namespace dscore::llama {
namespace {

using sdk::Error;

Error invalid(const std::string& message) { return Error(DSCORE_INVALID_ARGUMENT, message); }

// rope_scaling's JSON text (the host serialises the object) as key -> the
// value's text: a flat object of numbers, strings, booleans and nulls,
// which is all transformers writes there.
std::map<std::string, std::string> flat_object(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  auto fail = [&] {
    return invalid(
        "llama: rope_scaling must be null or a flat object such as "
        "{\"rope_type\": \"llama3\", \"factor\": 8.0, ...}; got " +
        text);
  };
  auto string_at = [&] {
    if (i >= text.size() || text[i] != '"') throw fail();
    const size_t end = text.find('"', i + 1);
    if (end == std::string::npos) throw fail();
    std::string s = text.substr(i + 1, end - i - 1);
    i = end + 1;
    return s;
  };
  skip();
  if (i >= text.size() || text[i++] != '{') throw fail();
  skip();
  if (i < text.size() && text[i] == '}') return out;
  while (true) {
    skip();
    const std::string key = string_at();
    skip();
    if (i >= text.size() || text[i++] != ':') throw fail();
    skip();
    if (i < text.size() && text[i] == '"') {
      out[key] = string_at();
    } else {
      const size_t end = text.find_first_of(",}", i);
      if (end == std::string::npos) throw fail();
      std::string v = text.substr(i, end - i);
      while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
      if (v.empty() || v[0] == '{' || v[0] == '[') throw fail();
      out[key] = v;
      i = end;
    }
    skip();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '}') return out;
    throw fail();
  }
}

double number_of(const std::map<std::string, std::string>& o, const std::string& key) {
  const auto it = o.find(key);
  if (it == o.end())
    throw invalid("llama: rope_scaling of rope_type \"llama3\" needs \"" + key +
                  "\" (factor, low_freq_factor, high_freq_factor, "
                  "original_max_position_embeddings)");
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0')
    throw invalid("llama: rope_scaling." + key + " must be a number, got " + it->second);
  return v;
}

RopeScaling read_rope_scaling(const std::string& text) {
  const std::map<std::string, std::string> o = flat_object(text);
  // transformers writes "rope_type"; configs from before 4.45 say "type".
  auto type = o.find("rope_type");
  if (type == o.end()) type = o.find("type");
  const std::string kind = type == o.end() ? "" : type->second;
  if (kind == "default") return {};  // no scaling
  if (kind != "llama3")
    throw invalid("llama: rope_scaling rope_type \"" + kind +
                  "\" is not supported; the llama model implements none (null) and \"llama3\"");
  RopeScaling s;
  s.llama3 = true;
  s.factor = number_of(o, "factor");
  s.low_freq_factor = number_of(o, "low_freq_factor");
  s.high_freq_factor = number_of(o, "high_freq_factor");
  s.original_max_position_embeddings =
      static_cast<int64_t>(number_of(o, "original_max_position_embeddings"));
  if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
      s.original_max_position_embeddings < 1)
    throw invalid(
        "llama: rope_scaling (llama3) needs factor > 0, 0 < low_freq_factor < high_freq_factor "
        "and original_max_position_embeddings >= 1");
  return s;
}

std::string str(int64_t v) { return std::to_string(v); }

// A JSON array of integers ("[1, 3]"), as config.json's mlp_only_layers.
std::vector<int64_t> int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  size_t i = text.find('[');
  const size_t end = text.rfind(']');
  if (i == std::string::npos || end == std::string::npos || end < i)
    throw invalid("llama: " + what + " must be a list of integers, not " + text);
  for (++i; i < end;) {
    while (i < end && (std::isspace(static_cast<unsigned char>(text[i])) || text[i] == ',')) ++i;
    if (i == end) break;
    char* stop = nullptr;
    const long long v = std::strtoll(text.c_str() + i, &stop, 10);
    if (stop == text.c_str() + i)
      throw invalid("llama: " + what + " must be a list of integers, not " + text);
    out.push_back(v);
    i = static_cast<size_t>(stop - text.c_str());
  }
  return out;
}

Architecture architecture_of(const LlamaSettings& s, const LlamaConfig& c) {
  const std::string& a = s.architecture;
  if (a == "llama") return Architecture::kLlama;
  if (a == "mixtral") return Architecture::kMixtral;
  if (a == "qwen2") return Architecture::kQwen2;
  if (a == "qwen2_moe") return Architecture::kQwen2Moe;
  if (a == "qwen3") return Architecture::kQwen3;
  if (a == "qwen3_moe") return Architecture::kQwen3Moe;
  if (a != "auto")
    throw invalid("llama: architecture \"" + a +
                  "\" is not one of auto, llama, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe");
  return c.num_local_experts > 0 ? Architecture::kMixtral : Architecture::kLlama;
}

// The MoE and Qwen settings (LlamaConfig::architecture,
// num_local_experts) and what they do not run under yet (docs/moe.md).
void check_moe(const LlamaConfig& c, const LlamaSettings& s) {
  if (s.router_jitter_noise != 0.0)
    throw invalid("llama: router_jitter_noise " + std::to_string(s.router_jitter_noise) +
                  " is not implemented (Mixtral's jitter of the MoE input in training); set it "
                  "to 0.0");
  if (c.has_moe() != c.moe_architecture())
    throw invalid(std::string("llama: ") +
                  (c.has_moe() ? "num_local_experts > 0 needs architecture mixtral, qwen2_moe or "
                                 "qwen3_moe"
                               : "architectures mixtral, qwen2_moe and qwen3_moe need "
                                 "num_local_experts > 0"));
  if (c.extra_attention_params() > 0 && (c.tp_size > 1 || c.sp_size > 1 || c.device == "cuda"))
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     "llama: Qwen's attention (q_norm and k_norm, q/k/v biases) under tensor or "
                     "sequence parallelism or on CUDA is not supported yet; set "
                     "tensor_parallel.autotp_size and sequence_parallel_size to 1 and "
                     "\"device\": \"cpu\"");
  if (c.shared_expert_intermediate_size > 0 && c.architecture != Architecture::kQwen2Moe)
    throw invalid(
        "llama: shared_expert_intermediate_size is Qwen2-MoE's: set architecture "
        "qwen2_moe or remove it");
  if (!c.has_moe()) return;
  if (c.decoder_sparse_step < 1) throw invalid("llama: decoder_sparse_step must be >= 1");
  if (c.moe_intermediate_size < 0) throw invalid("llama: moe_intermediate_size must be >= 0");
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_local_experts)
    throw invalid("llama: num_experts_per_tok " + str(c.num_experts_per_tok) +
                  " must be between 1 and num_local_experts (" + str(c.num_local_experts) + ")");
  if (!(c.router_aux_loss_coef >= 0)) throw invalid("llama: router_aux_loss_coef must be >= 0");
  const auto refuse = [](const std::string& what, const std::string& fix) {
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     "llama: MoE blocks " + what + " are not supported yet; " + fix);
  };
  if (c.device == "cuda") refuse("on CUDA", "train MoE with \"device\": \"cpu\"");
  if (c.tp_size > 1) refuse("under tensor parallelism", "set tensor_parallel.autotp_size to 1");
  if (c.sp_size > 1) refuse("under sequence parallelism", "set sequence_parallel_size to 1");
  if (c.ep_rank >= c.ep_size || c.num_local_experts % c.ep_size != 0)
    throw invalid("llama: " + str(c.num_local_experts) +
                  " experts do not spread evenly over expert_parallel.autoep_size " +
                  str(c.ep_size) + " ranks (or expert_parallel_rank " + str(c.ep_rank) +
                  " is outside them): use an autoep_size that divides num_local_experts");
}

}  // namespace

LlamaConfig read_config(const sdk::Params& p) {
  LlamaSettings s;
  LlamaConfig& c = s.config;
  c.vocab_size = p.integer("vocab_size");
  c.hidden_size = p.integer("hidden_size");
  c.intermediate_size = p.integer("intermediate_size");
  c.num_hidden_layers = p.integer("num_hidden_layers");
  c.num_attention_heads = p.integer("num_attention_heads");
  s.num_key_value_heads = p.integer("num_key_value_heads");
  c.max_position_embeddings = p.integer("max_position_embeddings");
  s.head_dim = p.integer("head_dim");
  c.rms_norm_eps = p.number("rms_norm_eps");
  c.rope_theta = p.number("rope_theta");
  c.tie_word_embeddings = p.boolean("tie_word_embeddings");
  c.initializer_range = p.number("initializer_range");
  s.hidden_act = p.string("hidden_act");
  s.biases = p.boolean("attention_bias") || p.boolean("mlp_bias");
  c.num_local_experts = p.integer("num_local_experts");
  c.num_experts_per_tok = p.integer("num_experts_per_tok");
  c.moe_intermediate_size = p.integer("moe_intermediate_size");
  c.shared_expert_intermediate_size = p.integer("shared_expert_intermediate_size");
  c.norm_topk_prob = p.boolean("norm_topk_prob");
  c.decoder_sparse_step = p.integer("decoder_sparse_step");
  s.architecture = p.string("architecture");
  if (const dscore_named_value* v = p.find("mlp_only_layers");
      v != nullptr && v->type != DSCORE_VALUE_NULL)
    s.mlp_only_layers = v->s != nullptr ? v->s : "";
  s.router_jitter_noise = p.number("router_jitter_noise");
  if (const dscore_named_value* v = p.find("rope_scaling");
      v != nullptr && v->type != DSCORE_VALUE_NULL)
    s.rope_scaling = v->s != nullptr ? v->s : "";
  return finish_config(std::move(s), p);
}

LlamaConfig finish_config(LlamaSettings s, const sdk::Params& p) {
  LlamaConfig c = s.config;
  c.num_key_value_heads = s.num_key_value_heads < 0 ? c.num_attention_heads : s.num_key_value_heads;
  const int64_t block = p.integer("block_size");
  c.block_size = block < 0 ? c.max_position_embeddings : block;
  c.device = p.string("device");
  c.cuda_dtype = p.string("cuda_dtype");
  if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 || c.num_hidden_layers < 1 ||
      c.num_attention_heads < 1 || c.num_key_value_heads < 1 || c.block_size < 1)
    throw invalid(
        "llama: vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
        "num_attention_heads, num_key_value_heads and block_size must be >= 1");
  const int64_t hd = s.head_dim;
  if (hd < 0 && c.hidden_size % c.num_attention_heads != 0)
    throw invalid("llama: hidden_size " + str(c.hidden_size) +
                  " is not divisible by num_attention_heads " + str(c.num_attention_heads) +
                  ": set head_dim");
  c.head_dim = hd < 0 ? c.hidden_size / c.num_attention_heads : hd;
  if (c.head_dim < 2 || c.head_dim % 2 != 0)
    throw invalid("llama: head_dim " + str(c.head_dim) +
                  " must be even (rotary embeddings pair its halves)");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw invalid("llama: num_attention_heads " + str(c.num_attention_heads) +
                  " is not a multiple of num_key_value_heads " + str(c.num_key_value_heads) +
                  ": each key/value head serves a whole group of query heads");
  if (c.block_size > c.max_position_embeddings)
    throw invalid("llama: block_size " + str(c.block_size) + " exceeds max_position_embeddings " +
                  str(c.max_position_embeddings));
  if (c.vocab_size > INT32_MAX) throw invalid("llama: vocab_size must fit int32 token ids");
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0))
    throw invalid("llama: rms_norm_eps and rope_theta must be > 0");
  if (s.biases)
    throw invalid(
        "llama: attention_bias and mlp_bias are not implemented (Llama has no biases); set "
        "them to false");
  if (s.hidden_act != "silu")
    throw invalid("llama: hidden_act \"" + s.hidden_act +
                  "\" is not supported; the llama model's MLP is SwiGLU (\"silu\")");
  if (!s.rope_scaling.empty()) c.rope_scaling = read_rope_scaling(s.rope_scaling);
  c.architecture = architecture_of(s, c);
  if (c.architecture == Architecture::kMixtral) c.norm_topk_prob = true;  // Mixtral has no switch
  if (!s.mlp_only_layers.empty())
    c.mlp_only_layers = int_list(s.mlp_only_layers, "mlp_only_layers");
  if (s.sliding_window >= 0 && s.sliding_window < c.block_size)
    throw invalid("llama: sliding_window " + str(s.sliding_window) +
                  " (windowed attention) is shorter than block_size " + str(c.block_size) +
                  " and not implemented; train with block_size at most the window");
  // output_router_logits and router_aux_loss_coef are training choices:
  // the model section's win over a folder's config.json (where
  // transformers saves output_router_logits false).
  c.output_router_logits = c.output_router_logits || p.boolean("output_router_logits");
  if (p.number("router_aux_loss_coef") >= 0)
    c.router_aux_loss_coef = p.number("router_aux_loss_coef");
  if (p.boolean("checkpoint_activations")) {
    const int64_t n = p.integer("number_checkpoints");
    c.checkpoint_blocks = n < 0 ? c.num_hidden_layers : std::min(n, c.num_hidden_layers);
  }
  c.tp_size = p.integer("tensor_parallel_size");
  c.tp_rank = p.integer("tensor_parallel_rank");
  transformer::check_tensor_parallel("llama", c.tp_size, c.tp_rank, c.num_attention_heads,
                                     c.num_key_value_heads, c.vocab_size, c.device);
  if (c.intermediate_size % c.tp_size != 0)
    throw invalid("llama: tensor_parallel.autotp_size " + str(c.tp_size) +
                  " does not divide intermediate_size " + str(c.intermediate_size) +
                  ": each rank holds an equal part of the MLP");
  c.sp_size = p.integer("sequence_parallel_size");
  c.sp_rank = p.integer("sequence_parallel_rank");
  transformer::check_sequence_parallel("llama", c.sp_size, c.sp_rank, c.block_size, c.local_heads(),
                                       c.local_kv_heads(), c.device);
  c.ep_size = p.integer("expert_parallel_size");
  c.ep_rank = p.integer("expert_parallel_rank");
  if (c.ep_size > 1 && !c.has_moe())
    throw invalid("llama: expert_parallel.autoep_size " + str(c.ep_size) +
                  " spreads MoE experts, but this model has none (num_local_experts 0): set "
                  "expert_parallel.enabled false, or train Mixtral or Qwen-MoE");
  check_moe(c, s);
  return c;
}

}  // namespace dscore::llama
