// Where a decoder model computes: its runner over one backend (CPU, or
// CUDA in CUDA builds) behind one interface, so the model picks the
// backend by its "device" param at creation.
#pragma once

#include <dscore/model.h>

#include <utility>

#include "tokens.h"

namespace dscore::transformer {

class Compute {
 public:
  virtual ~Compute() = default;
  virtual double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                                  double loss_scale) = 0;
  virtual void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
                       float* logits) = 0;
};

// Runner<Backend> constructed from (config, params, backend), owning the
// backend (constructed from `args`).
template <template <class> class Runner, class Config, class Params, class Backend>
class RunnerCompute final : public Compute {
 public:
  template <typename... BackendArgs>
  RunnerCompute(const Config& config, const Params& params, BackendArgs&&... args)
      : backend_(std::forward<BackendArgs>(args)...), runner_(config, params, backend_) {}
  double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                          double loss_scale) override {
    return runner_.forward_backward(tokens, hooks, loss_scale);
  }
  void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
               float* logits) override {
    runner_.forward(tokens, hooks, loss, logits);
  }

 private:
  Backend backend_;
  Runner<Backend> runner_;
};

}  // namespace dscore::transformer
