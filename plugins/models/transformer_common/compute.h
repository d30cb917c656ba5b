// Where a decoder model computes: its runner over one backend (CPU, or
// CUDA in CUDA builds) behind one interface, so the model picks the
// backend by its "device" param at creation.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/plugin.hpp>

#include <cstddef>
#include <string>
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

// The compute of an instance made only to describe the model
// (DSCORE_CREATE_DESCRIBE_ONLY, for `dscore plan`) on "device": "cuda":
// nothing loaded, no GPU needed. A call to compute on it is the host's
// mistake, and says so.
class DescribeOnlyCompute final : public Compute {
 public:
  explicit DescribeOnlyCompute(const char* model) : model_(model) {}
  double forward_backward(const SplitTokens&, const dscore_model_hooks&, double) override {
    refuse();
  }
  void forward(const SplitTokens&, const dscore_model_hooks&, double*, float*) override {
    refuse();
  }

 private:
  [[noreturn]] void refuse() const {
    throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                     model_ +
                         ": this instance was created only to describe the model "
                         "(DSCORE_CREATE_DESCRIBE_ONLY) and does not compute");
  }
  std::string model_;
};

// For one call, a backend that computes on a device stream (use_stream)
// computes on the host's (dscore_model_hooks.stream, where the host gives
// one), and on its own again after the call.
template <class Backend>
class HostStreamScope {
 public:
  HostStreamScope(Backend& backend, const dscore_model_hooks& hooks) : backend_(backend) {
    if constexpr (kStreams) {
      const bool given =
          hooks.struct_size >= offsetof(dscore_model_hooks, stream) + sizeof(hooks.stream);
      backend_.use_stream(given ? hooks.stream : nullptr);
    }
  }
  ~HostStreamScope() {
    if constexpr (kStreams) {
      try {
        backend_.use_stream(nullptr);
      } catch (...) {  // a failed device: the call's own error says so
      }
    }
  }
  HostStreamScope(const HostStreamScope&) = delete;
  HostStreamScope& operator=(const HostStreamScope&) = delete;

 private:
  static constexpr bool kStreams = requires(Backend & b) { b.use_stream(nullptr); };
  Backend& backend_;
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
    const HostStreamScope<Backend> on(backend_, hooks);
    return runner_.forward_backward(tokens, hooks, loss_scale);
  }
  void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
               float* logits) override {
    const HostStreamScope<Backend> on(backend_, hooks);
    runner_.forward(tokens, hooks, loss, logits);
  }

 private:
  Backend backend_;
  Runner<Backend> runner_;
};

}  // namespace dscore::transformer
