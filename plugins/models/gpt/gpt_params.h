// The GPT model's parameters as model.h describes them (layers of named
// tensors, nanoGPT's names and nn.Linear's (out, in) shapes) and their
// initial values: GPT-2's scheme (weights and embeddings N(0, 0.02), the
// residual projections N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm
// weights 1), each element a pure function of (seed, name, index).
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/tensor_split.hpp>

#include <memory>
#include <string>
#include <vector>

#include "gpt_config.h"

namespace dscore::gpt {

// Positions of a block's parameters within its layer.
enum BlockParam : int {
  kLn1Weight,
  kLn1Bias,
  kAttnWeight,
  kAttnBias,
  kAttnProjWeight,
  kAttnProjBias,
  kLn2Weight,
  kLn2Bias,
  kFcWeight,
  kFcBias,
  kFcProjWeight,
  kFcProjBias,
};
// An MoE block (GptConfig::moe_block): the first eight as a dense block's,
// then the gate, the experts' stacked MLPs (expert e's c_fc is row block e
// of (E, 4C, C); under expert parallelism this rank's E / ep_size of them)
// and, with moe_residual, PR-MoE's dense MLP and the
// coefficient that mixes the two.
enum MoeBlockParam : int {
  kGateWeight = kLn2Bias + 1,  // (E, C), no bias
  kExpertFcWeight,             // (E, 4C, C)
  kExpertFcBias,               // (E, 4C)
  kExpertProjWeight,           // (E, C, 4C)
  kExpertProjBias,             // (E, C)
  kResidualFcWeight,           // (4C, C) ... moe_residual only
  kResidualFcBias,
  kResidualProjWeight,
  kResidualProjBias,
  kCoefficientWeight,  // (2, C)
  kCoefficientBias,    // (2)
};
// Which of a block's parameters only its linears read, as their weights
// (layer_pass.h's gemm_weights). A model with MoE blocks names only the
// attention's, the weights both kinds of block hold at the same positions
// (the experts' linears read fp32 copies of their slices).
inline const std::vector<bool>& block_gemm_weights(bool moe = false) {
  static const auto make = [](bool with_mlp) {
    std::vector<bool> w(kFcProjBias + 1, false);
    for (int i : {kAttnWeight, kAttnProjWeight}) w[i] = true;
    if (with_mlp) w[kFcWeight] = w[kFcProjWeight] = true;
    return w;
  };
  static const std::vector<bool> dense = make(true), attention_only = make(false);
  return moe ? attention_only : dense;
}
enum EmbeddingParam : int { kWte, kWpe };
enum FinalParam : int { kLnfWeight, kLnfBias };

class GptParams {
 public:
  GptParams(const GptConfig& config, uint64_t seed);
  GptParams(const GptParams&) = delete;
  GptParams& operator=(const GptParams&) = delete;

  const dscore_model_description& description() const { return description_; }
  size_t param_count() const { return params_.size(); }
  int64_t numel(size_t index) const { return params_.at(index)->desc.numel; }
  // Elements [offset, offset + count) of parameter `index` (layer order).
  void init(size_t index, int64_t offset, int64_t count, float* out) const;
  // Element counts of layer `layer`'s parameters, in order.
  std::vector<int64_t> layer_numels(size_t layer) const;
  // Tensor parallelism: the first vocabulary row of this rank's part of
  // wte (0 when not split).
  int64_t vocab_first() const { return vocab_first_; }
  int64_t vocab_rows() const { return params_.front()->shape[0]; }
  uint64_t seed() const { return seed_; }

 private:
  enum class Init { kNormal, kResidualNormal, kZero, kOne };
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    Init init;
    dscore_model_param desc{};
  };
  struct Layer {
    std::string name;
    std::vector<const dscore_model_param*> params;
    dscore_model_layer desc{};
  };
  void add_layer(std::string name);
  // decay: the optimizer's weight decay applies (default: tensors of 2 or
  // more dimensions, nanoGPT's groups); expert: an MoE block's experts'
  // (DSCORE_PARAM_EXPERT).
  void add_param(std::string name, std::vector<int64_t> shape, Init init,
                 const sdk::TensorSplit& split, int decay = -1, bool expert = false);

  GptConfig config_;
  uint64_t seed_;
  int64_t vocab_first_ = 0;
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<const dscore_model_layer*> layer_ptrs_;
  int64_t token_shape_ = 0;
  dscore_model_input input_{};
  const dscore_model_input* input_ptr_ = nullptr;
  dscore_layer_tie tie_{};
  const dscore_layer_tie* tie_ptr_ = nullptr;
  dscore_model_description description_{};
};

}  // namespace dscore::gpt
