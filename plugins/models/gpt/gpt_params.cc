#include "gpt_params.h"

#include <dscore/cpp/counter_rng.hpp>

#include <cmath>

namespace dscore::gpt {

GptParams::GptParams(const GptConfig& config, uint64_t seed) : config_(config), seed_(seed) {
  const int64_t C = config.n_embd;
  const int t = static_cast<int>(config.tp_size), r = static_cast<int>(config.tp_rank);
  // Megatron's split (tensor parallelism, tp_size > 1): the token embedding
  // (and so the tied LM head) by vocabulary rows; q|k|v by heads, each of
  // the three blocks of c_attn's rows alike; the MLP's c_fc by rows; the two
  // projections by columns (their input). The rest is replicated.
  const auto rows = [&](int64_t whole, int blocks = 1) {
    return sdk::TensorSplit{0, blocks, whole, r * (whole / blocks / t)};
  };
  const auto columns = [&](int64_t whole) {
    return sdk::TensorSplit{1, 1, whole, r * (whole / t)};
  };
  const sdk::TensorSplit whole;
  const auto [vocab_first, vocab_rows] = sdk::even_part(config.vocab_size, t, r);
  vocab_first_ = vocab_first;
  const bool split = t > 1;
  const int64_t Ca = C / t, H = 4 * C / t;
  add_layer("transformer.embeddings");
  add_param("transformer.wte.weight", {vocab_rows, C}, Init::kNormal,
            split ? sdk::TensorSplit{0, 1, config.vocab_size, vocab_first} : whole);
  add_param("transformer.wpe.weight", {config.positions(), C}, Init::kNormal, whole);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    add_layer("transformer.h." + std::to_string(l));
    add_param(h + "ln_1.weight", {C}, Init::kOne, whole);
    add_param(h + "ln_1.bias", {C}, Init::kZero, whole);
    add_param(h + "attn.c_attn.weight", {3 * Ca, C}, Init::kNormal, split ? rows(3 * C, 3) : whole);
    add_param(h + "attn.c_attn.bias", {3 * Ca}, Init::kZero, split ? rows(3 * C, 3) : whole);
    add_param(h + "attn.c_proj.weight", {C, Ca}, Init::kResidualNormal, split ? columns(C) : whole);
    add_param(h + "attn.c_proj.bias", {C}, Init::kZero, whole);
    add_param(h + "ln_2.weight", {C}, Init::kOne, whole);
    add_param(h + "ln_2.bias", {C}, Init::kZero, whole);
    if (config.moe_block(l)) {
      // Under expert parallelism this rank's experts of the stacked tensors.
      const int64_t E = config.moe.num_experts, El = config.local_experts();
      const sdk::TensorSplit experts =
          config.ep_size > 1 ? sdk::TensorSplit{0, 1, E, config.first_expert()} : whole;
      add_param(h + "mlp.gate.wg.weight", {E, C}, Init::kNormal, whole);
      add_param(h + "mlp.experts.c_fc.weight", {El, H, C}, Init::kNormal, experts, -1, true);
      add_param(h + "mlp.experts.c_fc.bias", {El, H}, Init::kZero, experts, /*decay=*/0, true);
      add_param(h + "mlp.experts.c_proj.weight", {El, C, H}, Init::kResidualNormal, experts, -1,
                true);
      add_param(h + "mlp.experts.c_proj.bias", {El, C}, Init::kZero, experts, /*decay=*/0, true);
      if (config.moe_residual) {
        add_param(h + "mlp.mlp.c_fc.weight", {H, C}, Init::kNormal, whole);
        add_param(h + "mlp.mlp.c_fc.bias", {H}, Init::kZero, whole);
        add_param(h + "mlp.mlp.c_proj.weight", {C, H}, Init::kResidualNormal, whole);
        add_param(h + "mlp.mlp.c_proj.bias", {C}, Init::kZero, whole);
        add_param(h + "mlp.coefficient.weight", {2, C}, Init::kNormal, whole);
        add_param(h + "mlp.coefficient.bias", {2}, Init::kZero, whole);
      }
      continue;
    }
    add_param(h + "mlp.c_fc.weight", {H, C}, Init::kNormal, split ? rows(4 * C) : whole);
    add_param(h + "mlp.c_fc.bias", {H}, Init::kZero, split ? rows(4 * C) : whole);
    add_param(h + "mlp.c_proj.weight", {C, H}, Init::kResidualNormal,
              split ? columns(4 * C) : whole);
    add_param(h + "mlp.c_proj.bias", {C}, Init::kZero, whole);
  }
  add_layer("transformer.ln_f");
  add_param("transformer.ln_f.weight", {C}, Init::kOne, whole);
  add_param("transformer.ln_f.bias", {C}, Init::kZero, whole);

  for (const auto& layer : layers_) {
    layer->desc.struct_size = sizeof(dscore_model_layer);
    layer->desc.name = layer->name.c_str();
    layer->desc.param_count = layer->params.size();
    layer->desc.params = layer->params.data();
    layer_ptrs_.push_back(&layer->desc);
  }
  token_shape_ = config.block_size + 1;
  input_ = {sizeof(dscore_model_input), "tokens", DSCORE_DTYPE_I32, 1, &token_shape_};
  input_ptr_ = &input_;
  description_.struct_size = sizeof description_;
  description_.layer_count = layer_ptrs_.size();
  description_.layers = layer_ptrs_.data();
  description_.input_count = 1;
  description_.inputs = &input_ptr_;
  description_.hidden_size = C;
  // The LM head, in the final layer, reads the embeddings' wte.
  tie_ = {sizeof(dscore_layer_tie), 0, static_cast<size_t>(config.final_layer())};
  tie_ptr_ = &tie_;
  description_.tie_count = 1;
  description_.ties = &tie_ptr_;
}

void GptParams::add_layer(std::string name) {
  auto layer = std::make_unique<Layer>();
  layer->name = std::move(name);
  layers_.push_back(std::move(layer));
}

void GptParams::add_param(std::string name, std::vector<int64_t> shape, Init init,
                          const sdk::TensorSplit& split, int decay, bool expert) {
  auto p = std::make_unique<Param>();
  p->name = std::move(name);
  p->shape = std::move(shape);
  p->init = init;
  int64_t numel = 1;
  for (int64_t d : p->shape) numel *= d;
  p->desc.struct_size = sizeof(dscore_model_param);
  p->desc.name = p->name.c_str();
  p->desc.ndim = static_cast<int32_t>(p->shape.size());
  p->desc.shape = p->shape.data();
  p->desc.numel = numel;
  // nanoGPT's optimizer groups: 1-D tensors (biases, LayerNorm) get no
  // decay, and the experts' stacked biases neither.
  const bool decays = decay < 0 ? p->shape.size() >= 2 : decay != 0;
  p->desc.flags = decays ? 0u : DSCORE_PARAM_NO_WEIGHT_DECAY;
  split.declare(&p->desc);
  if (expert) p->desc.flags |= DSCORE_PARAM_EXPERT;
  layers_.back()->params.push_back(&p->desc);
  params_.push_back(std::move(p));
}

void GptParams::init(size_t index, int64_t offset, int64_t count, float* out) const {
  const Param& p = *params_.at(index);
  const uint64_t key = sdk::hash_name(p.name);
  double stddev = 0.02;
  if (p.init == Init::kResidualNormal)
    stddev /= std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  // Each element a function of its index in the whole tensor, so every
  // tensor-parallel size starts from the same model.
  sdk::for_each_whole_run(p.desc, offset, count, [&](int64_t local, int64_t whole, int64_t n) {
    float* o = out + (local - offset);
    for (int64_t k = 0; k < n; ++k) {
      switch (p.init) {
        case Init::kZero:
          o[k] = 0.0f;
          break;
        case Init::kOne:
          o[k] = 1.0f;
          break;
        default:
          o[k] = static_cast<float>(stddev *
                                    sdk::normal_at(seed_, key, static_cast<uint64_t>(whole + k)));
      }
    }
  });
}

std::vector<int64_t> GptParams::layer_numels(size_t layer) const {
  std::vector<int64_t> numels;
  const dscore_model_layer& l = *layer_ptrs_.at(layer);
  for (size_t i = 0; i < l.param_count; ++i) numels.push_back(l.params[i]->numel);
  return numels;
}

}  // namespace dscore::gpt
