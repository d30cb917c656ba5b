// The gpt model's Hugging Face face: GPT-2 (transformers' GPT2LMHeadModel).
// Hyperparameters from a folder's config.json (everything the gpt kernels do
// not compute is refused, naming the option), parameters read straight from
// its safetensors (any slice, for the rank that owns it), and the export's
// names, layouts and config.json. dscore's names are GPT-2's; the Conv1D
// weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored
// (in, out) there and (out, in) here, so they are transposed both ways.
#pragma once

#include <dscore/model.h>

#include <cstdint>
#include <memory>
#include <string>

#include "../hf_common/hf_folder.h"
#include "gpt_config.h"

namespace dscore::gpt {

// The model a GPT-2 config.json describes, trained on samples of
// block_size tokens (0 = n_positions; at most n_positions).
GptConfig gpt2_config(const hf::HfConfig& config, int64_t block_size);

// True for the four Conv1D weights GPT-2 stores transposed.
bool gpt2_transposed(const std::string& name);

// Reads parameters from a GPT-2 folder. Construction checks that every
// parameter of `params` is in the folder with its shape.
class Gpt2Weights {
 public:
  Gpt2Weights(std::shared_ptr<const hf::HfFolder> folder, const dscore_model_description& params);
  // Elements [offset, offset + count) of the parameter (dscore's layout).
  void read(const dscore_model_param& param, int64_t offset, int64_t count, float* out) const;
  const hf::HfFolder& folder() const { return *folder_; }

 private:
  std::shared_ptr<const hf::HfFolder> folder_;
};

// config.json for an export of `config` with weights of `dtype`: the
// original folder's config.json with the model's values set over it, or
// GPT-2's keys alone (base = nullptr: a model trained from scratch).
std::string gpt2_config_json(const GptConfig& config, dscore_dtype dtype, const hf::HfConfig* base);

}  // namespace dscore::gpt
