// A C++ model for engine tests (the embedding path: a dscore::Model
// subclass, no plugin). One layer, one parameter w of n elements, loss
// 0.5 * ||w - c||^2 whatever the batch, so the gradient is exactly w - c.
// Switches make it misbehave: NaN gradients, a forgotten release, an
// out-of-range acquire.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace dscore::testing {

class QuadraticModel : public Model {
 public:
  QuadraticModel(std::vector<float> initial, std::vector<float> target)
      : initial_(std::move(initial)), target_(std::move(target)) {
    shape_[0] = static_cast<int64_t>(initial_.size());
    param_.struct_size = sizeof param_;
    param_.name = "w";
    param_.ndim = 1;
    param_.shape = shape_;
    param_.numel = shape_[0];
    param_ptrs_[0] = &param_;
    layer_.struct_size = sizeof layer_;
    layer_.name = "layer0";
    layer_.param_count = 1;
    layer_.params = param_ptrs_;
    layer_ptrs_[0] = &layer_;
    description_.struct_size = sizeof description_;
    description_.layer_count = 1;
    description_.layers = layer_ptrs_;
  }

  bool poison_gradients = false;  // backward writes NaN
  bool forget_release = false;    // forward never releases the layer
  bool acquire_out_of_range = false;
  uint32_t view_flags = 0;  // dscore_layer_views.flags it asks with
  int forward_backward_calls = 0;

  std::string display_name() const override { return "test model 'quadratic'"; }
  const dscore_model_description& description() const override { return description_; }

  Status init_param(size_t, int64_t offset, int64_t count, float* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = initial_[static_cast<size_t>(offset + i)];
    return Status::Ok();
  }

  Status forward_backward(const dscore_batch&, const dscore_model_hooks& hooks, double loss_scale,
                          double* loss) override {
    ++forward_backward_calls;
    dscore_layer_views views{};
    views.struct_size = sizeof views;
    views.flags = view_flags;
    if (dscore_status st =
            hooks.acquire(hooks.ctx, acquire_out_of_range ? 7 : 0, DSCORE_ACQUIRE_FORWARD, &views);
        st != DSCORE_OK)
      return Status(st, "acquire failed");
    const float* w = static_cast<const float*>(views.params[0]->data);
    double sum = 0;
    for (size_t i = 0; i < target_.size(); ++i)
      sum += 0.5 * (w[i] - target_[i]) * (w[i] - target_[i]);
    *loss = sum;
    if (forget_release) return Status::Ok();
    hooks.release(hooks.ctx, 0);
    hooks.acquire(hooks.ctx, 0, DSCORE_ACQUIRE_BACKWARD, &views);
    float* g = static_cast<float*>(views.grads[0]->data);
    w = static_cast<const float*>(views.params[0]->data);
    for (size_t i = 0; i < target_.size(); ++i)
      g[i] += poison_gradients ? NAN : static_cast<float>(loss_scale * (w[i] - target_[i]));
    hooks.grads_ready(hooks.ctx, 0);
    hooks.release(hooks.ctx, 0);
    return Status::Ok();
  }

 private:
  std::vector<float> initial_, target_;
  int64_t shape_[1];
  dscore_model_param param_{};
  const dscore_model_param* param_ptrs_[1];
  dscore_model_layer layer_{};
  const dscore_model_layer* layer_ptrs_[1];
  dscore_model_description description_{};
};

}  // namespace dscore::testing
