// Model hooks over plain host memory for driving a model directly: every
// layer's parameters and gradients live here (fp32 or fp64), acquire lends
// them, and the calls are recorded so tests can check the hook protocol
// (every acquire released, grads_ready once per layer per backward).
#pragma once

#include <dscore/model.h>

#include <cstring>
#include <string>
#include <vector>

namespace dscore::transformer::testing {

class FakeLayers {
 public:
  FakeLayers(const dscore_model_description& d, dscore_dtype dtype) : dtype_(dtype) {
    const size_t es = dtype == DSCORE_DTYPE_F64 ? 8 : dtype == DSCORE_DTYPE_F32 ? 4 : 2;
    layers_.resize(d.layer_count);
    for (size_t l = 0; l < d.layer_count; ++l) {
      Layer& layer = layers_[l];
      for (size_t i = 0; i < d.layers[l]->param_count; ++i) {
        const dscore_model_param* p = d.layers[l]->params[i];
        layer.numel.push_back(p->numel);
        layer.param_data.emplace_back(static_cast<size_t>(p->numel) * es, 0);
        layer.grad_data.emplace_back(static_cast<size_t>(p->numel) * es, 0);
      }
      for (size_t i = 0; i < layer.numel.size(); ++i) {
        layer.params.push_back(tensor(layer.param_data[i].data(), layer.numel[i]));
        layer.grads.push_back(tensor(layer.grad_data[i].data(), layer.numel[i]));
      }
      for (size_t i = 0; i < layer.numel.size(); ++i) {
        layer.param_ptrs.push_back(&layer.params[i]);
        layer.grad_ptrs.push_back(&layer.grads[i]);
      }
    }
    hooks_.struct_size = sizeof hooks_;
    hooks_.ctx = this;
    hooks_.acquire = &acquire;
    hooks_.release = &release;
    hooks_.grads_ready = &grads_ready;
  }
  FakeLayers(const FakeLayers&) = delete;
  FakeLayers& operator=(const FakeLayers&) = delete;

  const dscore_model_hooks& hooks() const { return hooks_; }
  size_t layer_count() const { return layers_.size(); }
  size_t param_count(size_t l) const { return layers_[l].numel.size(); }
  int64_t numel(size_t l, size_t i) const { return layers_[l].numel[i]; }
  template <typename X>
  X* param(size_t l, size_t i) {
    return reinterpret_cast<X*>(layers_[l].param_data[i].data());
  }
  template <typename X>
  X* grad(size_t l, size_t i) {
    return reinterpret_cast<X*>(layers_[l].grad_data[i].data());
  }
  void zero_grads() {
    for (Layer& l : layers_)
      for (auto& g : l.grad_data) std::fill(g.begin(), g.end(), 0);
  }

  // Hook protocol record.
  int outstanding() const {
    int n = 0;
    for (const Layer& l : layers_) n += l.acquired;
    return n;
  }
  int grads_ready_calls(size_t l) const { return layers_[l].ready_calls; }
  std::vector<std::string> events;  // "F3", "B3", "R3", "G3"

 private:
  struct Layer {
    std::vector<int64_t> numel;
    std::vector<std::vector<unsigned char>> param_data, grad_data;
    std::vector<dscore_tensor> params, grads;
    std::vector<const dscore_tensor*> param_ptrs;
    std::vector<dscore_tensor*> grad_ptrs;
    int acquired = 0;
    int ready_calls = 0;
  };

  dscore_tensor tensor(void* data, int64_t numel) const {
    dscore_tensor t{};
    t.struct_size = sizeof t;
    t.data = data;
    t.dtype = dtype_;
    t.device_type = DSCORE_DEVICE_CPU;
    t.ndim = 1;
    t.numel = numel;
    return t;
  }
  static dscore_status acquire(void* ctx, size_t l, dscore_acquire_mode mode,
                               dscore_layer_views* out) {
    auto* self = static_cast<FakeLayers*>(ctx);
    if (l >= self->layers_.size()) return DSCORE_OUT_OF_RANGE;
    Layer& layer = self->layers_[l];
    layer.acquired += 1;
    out->count = layer.param_ptrs.size();
    out->params = layer.param_ptrs.data();
    out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? layer.grad_ptrs.data() : nullptr;
    self->events.push_back((mode == DSCORE_ACQUIRE_BACKWARD ? "B" : "F") + std::to_string(l));
    return DSCORE_OK;
  }
  static dscore_status release(void* ctx, size_t l) {
    auto* self = static_cast<FakeLayers*>(ctx);
    if (l >= self->layers_.size() || self->layers_[l].acquired == 0)
      return DSCORE_FAILED_PRECONDITION;
    self->layers_[l].acquired -= 1;
    self->events.push_back("R" + std::to_string(l));
    return DSCORE_OK;
  }
  static dscore_status grads_ready(void* ctx, size_t l) {
    auto* self = static_cast<FakeLayers*>(ctx);
    if (l >= self->layers_.size() || self->layers_[l].acquired == 0)
      return DSCORE_FAILED_PRECONDITION;
    self->layers_[l].ready_calls += 1;
    self->events.push_back("G" + std::to_string(l));
    return DSCORE_OK;
  }

  dscore_dtype dtype_;
  std::vector<Layer> layers_;
  dscore_model_hooks hooks_{};
};

}  // namespace dscore::transformer::testing
