// The "adagrad" optimizer: torch.optim.Adagrad's semantics, which is what
// DeepSpeed builds for "type": "Adagrad" (DeepSpeedCPUAdagrad under CPU
// offload computes the same with lr_decay 0): clr = lr / (1 + (step - 1) *
// lr_decay); g += weight_decay * p; sum += g * g; p -= clr * g / (sqrt(sum)
// + eps). The accumulator "sum" is host-owned fp32 state whose initial value
// is initial_accumulator_value. No betas: a scheduler's beta override is
// ignored, as DeepSpeed's OneCycle disables momentum cycling for Adagrad.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <memory>
#include <string>

namespace dscore::adagrad {
namespace {

using sdk::Error;

constexpr const char kSchema[] = R"json({
  "lr": {"type": "number", "default": 0.01, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "lr_decay": {"type": "number", "default": 0, "min": 0,
               "doc": "the step's lr is lr / (1 + (step - 1) * lr_decay)"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "L2 penalty: weight_decay * param is added to the gradient"},
  "initial_accumulator_value": {"type": "number", "default": 0, "min": 0,
                                "doc": "initial value of the sum of squared gradients"},
  "eps": {"type": "number", "default": 1e-10, "min": 0, "auto": "default",
          "doc": "added to the square root of the accumulator"},
  "maximize": {"type": "bool", "default": false,
               "doc": "maximize the objective instead of minimizing it"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";

class Adagrad : public sdk::OptimizerBase {
 public:
  Adagrad(sdk::HostRef host, const sdk::Params& p);
  void step(const dscore_optimizer_step_args* args) const;

  double lr_decay = 0;
  double weight_decay = 0;
  double eps = 0;
  bool maximize = false;
};

Adagrad::Adagrad(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
  sdk::check_non_negative(p.number("lr"), "lr");
  lr_decay = p.number("lr_decay");
  weight_decay = p.number("weight_decay");
  eps = p.number("eps");
  maximize = p.boolean("maximize");
  const double initial = p.number("initial_accumulator_value");
  sdk::check_non_negative(lr_decay, "lr_decay");
  sdk::check_non_negative(weight_decay, "weight_decay");
  sdk::check_non_negative(eps, "eps");
  sdk::check_non_negative(initial, "initial_accumulator_value");
  declare_slot("sum", initial);
}

template <dscore_dtype G, dscore_dtype P16>
void adagrad_tensor(const Adagrad& s, const sdk::StepHparams& h, int64_t n, float* param,
                    const void* grad, float* sum, void* out16) {
  const float clr = static_cast<float>(h.lr / (1.0 + static_cast<double>(h.step - 1) * s.lr_decay));
  const float scale = static_cast<float>(s.maximize ? -h.grad_scale : h.grad_scale);
  const float wd = static_cast<float>(s.weight_decay * h.weight_decay_multiplier);
  const float eps = static_cast<float>(s.eps);
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = sdk::load_as_float<G>(grad, i) * scale;
    if (wd != 0) g += wd * p;
    const float acc = sum[i] + g * g;
    sum[i] = acc;
    p -= clr * g / (std::sqrt(acc) + eps);
    param[i] = p;
    sdk::store_from_float<P16>(out16, i, p);
  }
}

void Adagrad::step(const dscore_optimizer_step_args* args) const {
  const Adagrad& self = *this;
  const sdk::StepHparams h = sdk::read_hparams(args, 0, 0);
  if (h.step < 1)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "step: hparams->step = " + std::to_string(h.step) + " must be >= 1 (1-based)");
  sdk::CpuStepTensors tensors(args, 1, "adagrad");
  for (size_t i = 0; i < tensors.count(); ++i) {
    tensors.with_dtypes(i, [&](auto g, auto o) {
      adagrad_tensor<decltype(g)::value, decltype(o)::value>(
          self, h, tensors.numel(i), tensors.param(i), tensors.grad(i)->data, tensors.state(0, i),
          tensors.param_16bit_data(i));
    });
  }
}

const dscore_plugin_descriptor kAdagrad = sdk::optimizer_descriptor<Adagrad>(
    "adagrad", "0.1.0",
    "Adagrad with lr decay, L2 weight decay and an initial accumulator (torch.optim.Adagrad)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16, kSchema);

}  // namespace
}  // namespace dscore::adagrad

DSCORE_PLUGIN_LIBRARY("dscore-adagrad", "0.1.0", "dscore", &dscore::adagrad::kAdagrad)
