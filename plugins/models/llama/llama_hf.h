// The llama model's Hugging Face face: transformers' LlamaForCausalLM and
// its relatives MixtralForCausalLM, Qwen2(Moe)ForCausalLM and
// Qwen3(Moe)ForCausalLM (LlamaConfig::architecture).
// Hyperparameters from a folder's config.json (each setting the llama
// kernels do not compute is refused, naming it and the file), parameters
// read straight from its safetensors (any slice, for the rank that owns
// it), and the export's config.json. dscore's names and layouts are
// transformers' own (nn.Linear's (out, in)), so nothing is transposed.
#pragma once

#include <dscore/model.h>

#include <memory>
#include <string>

#include "../hf_common/hf_folder.h"
#include "llama_config.h"
#include "llama_config_reader.h"

namespace dscore::llama {

// What a config.json of one of those (model_type "llama", "mixtral",
// "qwen2", "qwen2_moe", "qwen3", "qwen3_moe") gives: the legacy rope_theta /
// rope_scaling keys and transformers 5's rope_parameters both.
LlamaSettings llama_hf_settings(const hf::HfConfig& config);

// Reads parameters from a Llama folder. Construction checks that every
// parameter of `params` is in the folder with its shape (a tied model's
// lm_head.weight, when the folder has one, is not read).
class LlamaWeights {
 public:
  LlamaWeights(std::shared_ptr<const hf::HfFolder> folder, const dscore_model_description& params);
  void read(const dscore_model_param& param, int64_t offset, int64_t count, float* out) const;
  const hf::HfFolder& folder() const { return *folder_; }

 private:
  std::shared_ptr<const hf::HfFolder> folder_;
};

// config.json for an export of `config` with weights of `dtype`: the
// original folder's config.json with the model's values set over it, or
// a LlamaConfig's keys alone (base = nullptr: a model trained from scratch).
std::string llama_config_json(const LlamaConfig& config, dscore_dtype dtype,
                              const hf::HfConfig* base);

}  // namespace dscore::llama
