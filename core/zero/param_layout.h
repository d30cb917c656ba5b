// The flat layout of a model's parameters, llm.c style: every parameter has
// an offset in one flat buffer, and gradients and optimizer state share the
// layout, so "param i" and "grad i" live at the same offset. Built from the
// model's description (layers in order, parameters in layer order).
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/tensor_split.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/tensor/tensor_view.h"

namespace dscore {

struct ParamEntry {
  std::string name;
  size_t layer = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;  // elements from the start of the flat buffer
  uint32_t flags = 0;  // DSCORE_PARAM_*
  // Tensor parallelism: which part of the whole tensor this rank holds
  // (not split: the whole; model.h DSCORE_PARAM_TP_SPLIT).
  sdk::TensorSplit split;
  // The whole tensor's elements and shape (numel and shape where not split).
  int64_t whole_numel() const {
    if (!split.split() || shape[static_cast<size_t>(split.dim)] == 0) return numel;
    return numel / shape[static_cast<size_t>(split.dim)] * split.full_extent;
  }
  std::vector<int64_t> whole_shape() const {
    std::vector<int64_t> whole = shape;
    if (split.split()) whole[static_cast<size_t>(split.dim)] = split.full_extent;
    return whole;
  }
  // As the model declared it (name, this rank's shape, flags, its split);
  // points into this entry.
  dscore_model_param descriptor() const {
    dscore_model_param desc{};
    desc.struct_size = sizeof desc;
    desc.name = name.c_str();
    desc.ndim = static_cast<int32_t>(shape.size());
    desc.shape = shape.data();
    desc.numel = numel;
    desc.flags = flags;
    split.declare(&desc);
    return desc;
  }
  // fn(local, whole, n) for each run of elements [offset, offset + count)
  // that lies consecutively in the whole tensor (sdk::for_each_whole_run):
  // one run where not split.
  template <class Fn>
  void for_each_whole_run(int64_t offset, int64_t count, Fn&& fn) const {
    sdk::for_each_whole_run(descriptor(), offset, count, fn);
  }
};

// A host view of one whole parameter at `data` (the model's shape and name).
inline dscore_tensor param_view(void* data, dscore_dtype dtype, const ParamEntry& p) {
  return tensor::host_view(data, dtype, p.shape, p.numel, p.name.c_str());
}

class ParamLayout {
 public:
  // Fails (naming the model's parameter) when a shape is empty or negative.
  static Result<ParamLayout> from_description(const dscore_model_description& description);
  // The parameters of `whole` that `keep` selects (by index), in order,
  // back to back from 0, in the layers of `whole` that keep any (no layer is
  // empty). `kept` receives each kept parameter's index in `whole`, and
  // `layers` each kept layer's.
  static ParamLayout subset(const ParamLayout& whole, const std::vector<bool>& keep,
                            std::vector<size_t>* kept, std::vector<size_t>* layers);
  // `params` (each's layer set, layers in order, every one of `layers`
  // holding some) back to back from 0.
  static ParamLayout of(std::vector<ParamEntry> params, size_t layers);

  const std::vector<ParamEntry>& params() const { return params_; }
  size_t layer_count() const { return layer_first_.size(); }
  // Parameters of `layer` are params()[first(layer) .. first(layer + 1)).
  size_t layer_first(size_t layer) const { return layer_first_[layer]; }
  size_t layer_end(size_t layer) const {
    return layer + 1 < layer_first_.size() ? layer_first_[layer + 1] : params_.size();
  }
  int64_t total_numel() const { return total_numel_; }

 private:
  std::vector<ParamEntry> params_;
  std::vector<size_t> layer_first_;
  int64_t total_numel_ = 0;
};

}  // namespace dscore
