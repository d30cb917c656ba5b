#include "gpt2_hf.h"

#include <dscore/cpp/tensor_split.hpp>

#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <vector>

#include "../hf_common/hf_config.h"

namespace dscore::gpt {
namespace {

using sdk::Error;

Error unsupported(const hf::HfConfig& c, const std::string& option, const std::string& why) {
  return Error(DSCORE_UNIMPLEMENTED,
               c.path() + ": " + option + " is not supported by dscore's gpt2 model: " + why);
}

// The whole tensor's shape (a tensor-parallel rank holds a part of it).
std::vector<int64_t> shape_of(const dscore_model_param& p) { return sdk::whole_shape(p); }

}  // namespace

GptConfig gpt2_config(const hf::HfConfig& c, int64_t block_size) {
  const std::string model_type = c.string("model_type", "");
  if (model_type != "gpt2")
    throw Error(DSCORE_INVALID_ARGUMENT,
                c.path() + ": model_type is \"" + model_type +
                    "\"; model type \"gpt2\" reads GPT-2 folders (model_type \"gpt2\")");
  const std::string act = c.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw unsupported(c, "activation_function \"" + act + "\"",
                      "its MLP computes GELU's tanh approximation (gelu_new, gelu_pytorch_tanh)");
  if (!c.boolean("scale_attn_weights", true))
    throw unsupported(c, "scale_attn_weights false",
                      "attention scores are always scaled by "
                      "1/sqrt(head size)");
  if (c.boolean("scale_attn_by_inverse_layer_idx", false))
    throw unsupported(c, "scale_attn_by_inverse_layer_idx true",
                      "attention scores are not scaled by the layer index");
  if (c.boolean("reorder_and_upcast_attn", false))
    throw unsupported(c, "reorder_and_upcast_attn true",
                      "the Mistral-style attention "
                      "reordering is not implemented");
  if (c.boolean("add_cross_attention", false))
    throw unsupported(c, "add_cross_attention true", "it is a decoder-only model");
  if (!c.boolean("tie_word_embeddings", true))
    throw unsupported(c, "tie_word_embeddings false",
                      "the LM head is the token embedding wte (tied)");
  const double eps = c.number("layer_norm_epsilon", 1e-5);
  if (std::abs(eps - 1e-5) > 1e-12)
    throw unsupported(c, "layer_norm_epsilon " + std::to_string(eps),
                      "its LayerNorm uses GPT-2's epsilon 1e-5");
  GptConfig g;
  g.n_layer = c.integer("n_layer");
  g.n_head = c.integer("n_head");
  g.n_embd = c.integer("n_embd");
  g.vocab_size = c.integer("vocab_size");
  g.n_positions = c.integer("n_positions");
  if (c.has("n_inner") && c.integer("n_inner") != 4 * g.n_embd)
    throw unsupported(c, "n_inner " + std::to_string(c.integer("n_inner")),
                      "the MLP is 4 * n_embd = " + std::to_string(4 * g.n_embd) + " wide");
  if (g.n_layer < 1 || g.n_head < 1 || g.n_embd < 1 || g.vocab_size < 1 || g.n_positions < 1)
    throw Error(DSCORE_INVALID_ARGUMENT,
                c.path() + ": n_layer, n_head, n_embd, vocab_size and n_positions must be >= 1");
  if (g.n_embd % g.n_head != 0)
    throw Error(DSCORE_INVALID_ARGUMENT, c.path() + ": n_embd " + std::to_string(g.n_embd) +
                                             " is not divisible by n_head " +
                                             std::to_string(g.n_head));
  if (g.vocab_size > INT32_MAX)
    throw Error(DSCORE_INVALID_ARGUMENT, c.path() + ": vocab_size must fit int32 token ids");
  if (block_size > g.n_positions)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "model.block_size " + std::to_string(block_size) + " is more than " + c.path() +
                    "'s n_positions " + std::to_string(g.n_positions) +
                    ": GPT-2 has position embeddings for n_positions tokens; set block_size <= " +
                    std::to_string(g.n_positions) + " (or leave it out: n_positions)");
  g.block_size = block_size > 0 ? block_size : g.n_positions;
  return g;
}

bool gpt2_transposed(const std::string& name) {
  for (const char* suffix :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return false;
}

Gpt2Weights::Gpt2Weights(std::shared_ptr<const hf::HfFolder> folder,
                         const dscore_model_description& d)
    : folder_(std::move(folder)) {
  for (size_t l = 0; l < d.layer_count; ++l) {
    for (size_t i = 0; i < d.layers[l]->param_count; ++i) {
      const dscore_model_param& p = *d.layers[l]->params[i];
      std::vector<int64_t> shape = shape_of(p);
      if (gpt2_transposed(p.name)) std::swap(shape[0], shape[1]);
      folder_->tensor(p.name, shape);  // throws, naming what is wrong
    }
  }
}

void Gpt2Weights::read(const dscore_model_param& p, int64_t offset, int64_t count,
                       float* out) const {
  std::vector<int64_t> shape = shape_of(p);
  if (gpt2_transposed(p.name)) {
    std::swap(shape[0], shape[1]);
    folder_->read_transposed(folder_->tensor(p.name, shape), offset, count, out);
  } else {
    folder_->read(folder_->tensor(p.name, shape), offset, count, out);
  }
}

std::string gpt2_config_json(const GptConfig& g, dscore_dtype dtype, const hf::HfConfig* base) {
  const char* dtype_name = dtype == DSCORE_DTYPE_BF16  ? "bfloat16"
                           : dtype == DSCORE_DTYPE_F16 ? "float16"
                                                       : "float32";
  std::vector<std::pair<std::string, std::string>> values = {
      {"architectures", "[\"GPT2LMHeadModel\"]"},
      {"model_type", "\"gpt2\""},
      {"n_layer", std::to_string(g.n_layer)},
      {"n_head", std::to_string(g.n_head)},
      {"n_embd", std::to_string(g.n_embd)},
      {"n_positions", std::to_string(g.positions())},
      {"vocab_size", std::to_string(g.vocab_size)},
      {"n_inner", "null"},
      {"activation_function", "\"gelu_new\""},
      {"layer_norm_epsilon", "1e-05"},
      {"scale_attn_weights", "true"},
      {"scale_attn_by_inverse_layer_idx", "false"},
      {"reorder_and_upcast_attn", "false"},
      {"add_cross_attention", "false"},
      {"tie_word_embeddings", "true"},
      {"dtype", hf::json_string(dtype_name)},
  };
  // transformers 4.56 renamed torch_dtype to dtype; keep an older file's key true.
  if (base != nullptr && base->has("torch_dtype"))
    values.emplace_back("torch_dtype", hf::json_string(dtype_name));
  if (base == nullptr) {
    // dscore's gpt has no dropout; transformers would otherwise apply 0.1.
    for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
      values.emplace_back(key, "0.0");
    values.emplace_back("n_ctx", std::to_string(g.positions()));
  }
  return hf::write_config_json(base != nullptr ? base->text() : "", values);
}

}  // namespace dscore::gpt
