// Helpers for model plugins (header-only; never crosses the ABI).
// AcquiredLayer: one acquire() of a layer through the host hooks, checked
// against the parameter count the model declared for it, and released by
// the destructor on every path, also when an exception unwinds (model.h:
// every acquire is matched by a release, also on error). A failed hook
// throws sdk::Reported (the host already holds its message).
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/plugin.hpp>

#include <string>

namespace dscore::sdk {

class AcquiredLayer {
 public:
  // `flags`: DSCORE_VIEWS_* (model.h), what the model promises about its
  // use of the views.
  AcquiredLayer(const dscore_model_hooks& hooks, size_t layer, dscore_acquire_mode mode,
                size_t expected_params, uint32_t flags = 0)
      : hooks_(hooks), layer_(layer) {
    views_.struct_size = sizeof views_;
    views_.flags = flags;
    check(hooks_.acquire(hooks_.ctx, layer_, mode, &views_));
    held_ = true;
    if (views_.count != expected_params || views_.params == nullptr ||
        (mode == DSCORE_ACQUIRE_BACKWARD && views_.grads == nullptr))
      throw Error(
          DSCORE_INVALID_ARGUMENT,
          "acquire(" + std::to_string(layer) + ") lent " + std::to_string(views_.count) +
              " parameters" +
              (mode == DSCORE_ACQUIRE_BACKWARD && views_.grads == nullptr ? " and no gradients"
                                                                          : "") +
              "; the model declared " + std::to_string(expected_params));
  }
  ~AcquiredLayer() {
    if (held_) hooks_.release(hooks_.ctx, layer_);  // error path: the first error wins
  }
  AcquiredLayer(const AcquiredLayer&) = delete;
  AcquiredLayer& operator=(const AcquiredLayer&) = delete;

  void grads_ready() { check(hooks_.grads_ready(hooks_.ctx, layer_)); }
  void release() {
    held_ = false;
    check(hooks_.release(hooks_.ctx, layer_));
  }
  const dscore_layer_views& views() const { return views_; }

 private:
  const dscore_model_hooks& hooks_;
  size_t layer_;
  dscore_layer_views views_{};
  bool held_ = false;
};

}  // namespace dscore::sdk
