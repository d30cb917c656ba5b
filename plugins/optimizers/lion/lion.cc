// The "lion" optimizer: DeepSpeed's FusedLion / DeepSpeedCPULion (Chen et
// al. 2023, "Symbolic Discovery of Optimization Algorithms"). Per element:
// c = beta1 m + (1 - beta1) g; p = p (1 - lr wd) - lr sign(c) (decoupled
// decay on the pre-update p; sign(0) = 0); m = beta2 m + (1 - beta2) g. One
// host-owned fp32 slot, exp_avg. A scheduler's beta overrides (OneCycle)
// apply, as Lion has betas.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <memory>
#include <string>
#include <vector>

namespace dscore::lion {
namespace {

using sdk::Error;

// DeepSpeed's FusedLion and DeepSpeedCPULion defaults.
constexpr const char kSchema[] = R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999], "auto": "default",
            "doc": "[beta1, beta2]: beta1 interpolates the update direction, beta2 the momentum, each in [0, 1)"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "decoupled weight decay: p *= 1 - lr * weight_decay"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";

class Lion : public sdk::OptimizerBase {
 public:
  Lion(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
    sdk::check_non_negative(p.number("lr"), "lr");
    const std::vector<double> betas = p.numbers("betas");
    sdk::check_betas(betas);
    beta1 = betas[0];
    beta2 = betas[1];
    weight_decay = p.number("weight_decay");
    sdk::check_non_negative(weight_decay, "weight_decay");
    declare_slot("exp_avg");
  }
  void step(const dscore_optimizer_step_args* args) const;

  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0;
};

template <dscore_dtype G, dscore_dtype P16>
void lion_tensor(const Lion& s, const sdk::StepHparams& h, int64_t n, float* param,
                 const void* grad, float* exp_avg, void* out16) {
  const float lr = static_cast<float>(h.lr);
  const float beta1 = static_cast<float>(h.beta1), beta2 = static_cast<float>(h.beta2);
  const float scale = static_cast<float>(h.grad_scale);
  const float after_decay =
      static_cast<float>(1.0 - h.lr * s.weight_decay * h.weight_decay_multiplier);
  for (int64_t i = 0; i < n; ++i) {
    const float g = sdk::load_as_float<G>(grad, i) * scale;
    const float m = exp_avg[i];
    const float c = beta1 * m + (1.0f - beta1) * g;
    const float direction = c > 0 ? 1.0f : (c < 0 ? -1.0f : 0.0f);
    const float p = param[i] * after_decay - lr * direction;
    exp_avg[i] = beta2 * m + (1.0f - beta2) * g;
    param[i] = p;
    sdk::store_from_float<P16>(out16, i, p);
  }
}

void Lion::step(const dscore_optimizer_step_args* args) const {
  const sdk::StepHparams h = sdk::read_checked_hparams(args, beta1, beta2, /*one_based=*/false);
  sdk::CpuStepTensors tensors(args, 1, "lion");
  for (size_t i = 0; i < tensors.count(); ++i) {
    tensors.with_dtypes(i, [&](auto g, auto o) {
      lion_tensor<decltype(g)::value, decltype(o)::value>(
          *this, h, tensors.numel(i), tensors.param(i), tensors.grad(i)->data, tensors.state(0, i),
          tensors.param_16bit_data(i));
    });
  }
}

const dscore_plugin_descriptor kLion = sdk::optimizer_descriptor<Lion>(
    "lion", "0.1.0",
    "Lion: sign of interpolated momentum, decoupled weight decay (DeepSpeed FusedLion math)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16, kSchema);

}  // namespace
}  // namespace dscore::lion

DSCORE_PLUGIN_LIBRARY("dscore-lion", "0.1.0", "dscore", &dscore::lion::kLion)
