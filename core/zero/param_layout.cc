#include "core/zero/param_layout.h"

namespace dscore {

Result<ParamLayout> ParamLayout::from_description(const dscore_model_description& description) {
  ParamLayout layout;
  int64_t offset = 0;
  for (size_t l = 0; l < description.layer_count; ++l) {
    const dscore_model_layer* layer = description.layers[l];
    layout.layer_first_.push_back(layout.params_.size());
    for (size_t p = 0; p < layer->param_count; ++p) {
      const dscore_model_param* param = layer->params[p];
      ParamEntry entry;
      entry.name = param->name;
      entry.layer = l;
      entry.shape.assign(param->shape, param->shape + param->ndim);
      entry.numel = param->numel;
      entry.flags = param->flags;
      entry.split = sdk::TensorSplit::of(*param);
      if (entry.numel <= 0)
        return invalid_argument("model parameter '" + entry.name + "' has " +
                                std::to_string(entry.numel) +
                                " elements; every parameter needs at least one");
      entry.offset = offset;
      offset += entry.numel;
      layout.params_.push_back(std::move(entry));
    }
  }
  layout.total_numel_ = offset;
  return layout;
}

ParamLayout ParamLayout::subset(const ParamLayout& whole, const std::vector<bool>& keep,
                                std::vector<size_t>* kept, std::vector<size_t>* layers) {
  ParamLayout layout;
  int64_t offset = 0;
  kept->clear();
  layers->clear();
  for (size_t l = 0; l < whole.layer_count(); ++l) {
    const size_t first = layout.params_.size();
    for (size_t i = whole.layer_first(l); i < whole.layer_end(l); ++i) {
      if (!keep[i]) continue;
      ParamEntry entry = whole.params()[i];
      entry.layer = layers->size();
      entry.offset = offset;
      offset += entry.numel;
      layout.params_.push_back(std::move(entry));
      kept->push_back(i);
    }
    if (layout.params_.size() == first) continue;
    layout.layer_first_.push_back(first);
    layers->push_back(l);
  }
  layout.total_numel_ = offset;
  return layout;
}

ParamLayout ParamLayout::of(std::vector<ParamEntry> params, size_t layers) {
  ParamLayout layout;
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    while (layout.layer_first_.size() <= params[i].layer && layout.layer_first_.size() < layers)
      layout.layer_first_.push_back(i);
    params[i].offset = offset;
    offset += params[i].numel;
  }
  layout.params_ = std::move(params);
  layout.total_numel_ = offset;
  return layout;
}

}  // namespace dscore
