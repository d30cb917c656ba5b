// A model's parameters as model.h describes them, built layer by layer:
// owns the names, shapes and the dscore_model_description pointing at them
// (stable addresses: the host reads them while the instance lives). 1-D
// tensors (norms, biases) are marked DSCORE_PARAM_NO_WEIGHT_DECAY, as
// nanoGPT's and transformers' optimizer groups do.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/tensor_split.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dscore::transformer {

class ModelDescription {
 public:
  ModelDescription() = default;
  ModelDescription(const ModelDescription&) = delete;
  ModelDescription& operator=(const ModelDescription&) = delete;

  void add_layer(std::string name) {
    auto layer = std::make_unique<Layer>();
    layer->name = std::move(name);
    layers_.push_back(std::move(layer));
  }
  // A parameter of the last layer added; returns its index (layer order).
  // `split`: the part of the whole tensor this rank holds (tensor
  // parallelism; sdk/include/dscore/cpp/tensor_split.hpp), none by default;
  // `flags`: DSCORE_PARAM_* beside the 1-D tensors' no-decay.
  size_t add_param(std::string name, std::vector<int64_t> shape, const sdk::TensorSplit& split = {},
                   uint32_t flags = 0) {
    auto p = std::make_unique<Param>();
    p->name = std::move(name);
    p->shape = std::move(shape);
    int64_t numel = 1;
    for (int64_t d : p->shape) numel *= d;
    p->desc.struct_size = sizeof(dscore_model_param);
    p->desc.name = p->name.c_str();
    p->desc.ndim = static_cast<int32_t>(p->shape.size());
    p->desc.shape = p->shape.data();
    p->desc.numel = numel;
    p->desc.flags = (p->shape.size() < 2 ? DSCORE_PARAM_NO_WEIGHT_DECAY : 0u) | flags;
    split.declare(&p->desc);
    layers_.back()->params.push_back(&p->desc);
    params_.push_back(std::move(p));
    return params_.size() - 1;
  }
  // After the last parameter: one int32 input `input` of `width` per sample.
  void finish(const char* input, int64_t width, int64_t hidden_size) {
    for (const auto& layer : layers_) {
      layer->desc.struct_size = sizeof(dscore_model_layer);
      layer->desc.name = layer->name.c_str();
      layer->desc.param_count = layer->params.size();
      layer->desc.params = layer->params.data();
      layer_ptrs_.push_back(&layer->desc);
    }
    input_width_ = width;
    input_ = {sizeof(dscore_model_input), input, DSCORE_DTYPE_I32, 1, &input_width_};
    input_ptr_ = &input_;
    description_.struct_size = sizeof description_;
    description_.layer_count = layer_ptrs_.size();
    description_.layers = layer_ptrs_.data();
    description_.input_count = 1;
    description_.inputs = &input_ptr_;
    description_.hidden_size = hidden_size;
  }

  const dscore_model_description& description() const { return description_; }
  size_t param_count() const { return params_.size(); }
  const std::string& name(size_t index) const { return params_.at(index)->name; }
  int64_t numel(size_t index) const { return params_.at(index)->desc.numel; }
  const dscore_model_param& param(size_t index) const { return params_.at(index)->desc; }
  // Element counts of layer `layer`'s parameters, in order.
  std::vector<int64_t> layer_numels(size_t layer) const {
    std::vector<int64_t> numels;
    for (const dscore_model_param* p : layers_.at(layer)->params) numels.push_back(p->numel);
    return numels;
  }

 private:
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    dscore_model_param desc{};
  };
  struct Layer {
    std::string name;
    std::vector<const dscore_model_param*> params;
    dscore_model_layer desc{};
  };
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<const dscore_model_layer*> layer_ptrs_;
  int64_t input_width_ = 0;
  dscore_model_input input_{};
  const dscore_model_input* input_ptr_ = nullptr;
  dscore_model_description description_{};
};

}  // namespace dscore::transformer
