// Where the GPT model computes: a runner (runner.h) over the CPU backend or,
// in CUDA builds, the CUDA backend, behind one interface so gpt.cc picks
// by the "device" param.
#pragma once

#include <dscore/model.h>

#include <memory>

#include "gpt_config.h"
#include "gpt_params.h"
#include "runner.h"
#include "tokens.h"

namespace dscore::gpt {

class GptCompute {
 public:
  virtual ~GptCompute() = default;
  virtual double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                                  double loss_scale) = 0;
  virtual void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
                       float* logits) = 0;
};

template <class Backend>
class RunnerCompute final : public GptCompute {
 public:
  template <typename... BackendArgs>
  RunnerCompute(const GptConfig& config, const GptParams& params, BackendArgs&&... args)
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
  GptRunner<Backend> runner_;
};

// Activations are counted in `host`'s ledger.
std::unique_ptr<GptCompute> make_cpu_compute(const GptConfig& config, const GptParams& params,
                                             sdk::HostRef host);
// Defined by cuda/ in CUDA builds; elsewhere it throws, saying so.
std::unique_ptr<GptCompute> make_cuda_compute(const GptConfig& config, const GptParams& params);

}  // namespace dscore::gpt
