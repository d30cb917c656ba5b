// The llama model's parameters as model.h describes them: layers of named
// tensors in transformers' LlamaForCausalLM names and nn.Linear's (out, in)
// shapes, so a state_dict exported from them loads into transformers as
// is. Initial values as transformers' LlamaPreTrainedModel: linear and
// embedding weights normal(0, initializer_range), RMSNorm weights 1; each
// element a pure function of (seed, name, index).
#pragma once

#include <dscore/model.h>

#include <string>
#include <vector>

#include "../transformer_common/model_description.h"
#include "llama_config.h"

namespace dscore::llama {

// Positions of a block's parameters within its layer.
enum BlockParam : int {
  kInputNorm,
  kQProj,
  kKProj,
  kVProj,
  kOProj,
  kPostAttentionNorm,
  kGateProj,
  kUpProj,
  kDownProj,
};
// An MoE block (LlamaConfig::moe_block): the first six as a dense block's,
// then the router (E, C) and each expert's three weights, expert by
// expert: gate (I, C), down (C, I), up (I, C) (Mixtral's w1, w2, w3), as
// transformers' files hold them, then Qwen2-MoE's shared expert. A Qwen3
// block ends in q_norm and k_norm (head_dim each), a Qwen2 block in the
// q, k and v biases. Under expert parallelism a block holds only this
// rank's experts (LlamaConfig::held_experts, named by their number in the
// whole model, flagged DSCORE_PARAM_EXPERT): `expert` counts from the
// first one held.
inline constexpr int kRouter = kGateProj;  // block_sparse_moe.gate.weight
enum ExpertWeight : int { kW1, kW2, kW3 };
inline int expert_param(int64_t expert, ExpertWeight w) {
  return kRouter + 1 + 3 * static_cast<int>(expert) + w;
}
// Qwen2-MoE's shared expert, after the `held` experts: its gate, down and
// up weights (as an expert's), then shared_expert_gate (1, C).
inline int shared_expert_param(int64_t held, int which) { return expert_param(held, kW1) + which; }
inline constexpr int kSharedGate = 3;
// Which of a block's parameters only its linears read, as their weights
// (layer_pass.h's gemm_weights). An MoE block names only the attention's
// (its experts' linears read fp32 copies).
inline const std::vector<bool>& block_gemm_weights(bool moe = false) {
  static const auto make = [](bool with_mlp) {
    std::vector<bool> w(kDownProj + 1, false);
    for (int i : {kQProj, kKProj, kVProj, kOProj}) w[i] = true;
    if (with_mlp) w[kGateProj] = w[kUpProj] = w[kDownProj] = true;
    return w;
  };
  static const std::vector<bool> dense = make(true), attention_only = make(false);
  return moe ? attention_only : dense;
}
enum EmbeddingParam : int { kEmbedTokens };
enum FinalParam : int { kFinalNorm, kLmHead };  // kLmHead only when untied
// The same for the token embedding's acquires that only look rows up (from
// the bf16 view: CpuBackend::embedding_forward) or multiply by it as the
// tied LM head (whose weight-gradient product then overwrites its
// gradient's copy, lent unwritten): its fp32 copy, 32000 x C on the ~100M
// Llama, is not converted on every acquire. And the final layer's, for the
// untied head's acquire (the final RMSNorm's weight is read).
inline const std::vector<bool>& embedding_gemm_weights() {
  static const std::vector<bool> w{true};
  return w;
}
inline const std::vector<bool>& final_gemm_weights() {
  static const std::vector<bool> w{false, true};
  return w;
}

class LlamaParams {
 public:
  LlamaParams(const LlamaConfig& config, uint64_t seed);
  // The description points into this object: neither copied nor moved.
  LlamaParams(const LlamaParams&) = delete;
  LlamaParams& operator=(const LlamaParams&) = delete;

  const dscore_model_description& description() const { return description_; }
  size_t param_count() const { return table_.param_count(); }
  int64_t numel(size_t index) const { return table_.numel(index); }
  // Elements [offset, offset + count) of parameter `index` (layer order).
  void init(size_t index, int64_t offset, int64_t count, float* out) const;
  std::vector<int64_t> layer_numels(size_t layer) const { return table_.layer_numels(layer); }
  // Tensor parallelism: this rank's vocabulary rows of the embedding and
  // the LM head (all of them when not split).
  int64_t vocab_first() const { return vocab_first_; }
  int64_t vocab_rows() const { return table_.param(0).shape[0]; }

 private:
  void add_param(std::string name, std::vector<int64_t> shape, const sdk::TensorSplit& part = {},
                 bool ones = false, uint32_t flags = 0) {
    table_.add_param(std::move(name), std::move(shape), part, flags);
    ones_.push_back(ones);
  }
  void add_experts(const std::string& block_prefix, const LlamaConfig& config);

  LlamaConfig config_;
  uint64_t seed_;
  int64_t vocab_first_ = 0;
  transformer::ModelDescription table_;
  std::vector<bool> ones_;  // per parameter: an RMSNorm weight (starts at 1)
  // table_'s description with the tied head's tie (none when untied).
  dscore_layer_tie tie_{};
  const dscore_layer_tie* tie_ptr_ = nullptr;
  dscore_model_description description_{};
};

}  // namespace dscore::llama
