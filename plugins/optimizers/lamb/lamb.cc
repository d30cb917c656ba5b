// The "lamb" optimizer: DeepSpeed's FusedLamb (docs/deepspeed-reference.md#fusedlamb). Per
// parameter TENSOR: Adam moments without bias correction inside, update
// u = m / (sqrt(v) + eps) + wd p (eps inside the sqrt when eps_inside_sqrt),
// trust ratio r = |p| / |u| (1 when either norm is 0) clamped to
// [min_coeff, max_coeff], step size lr sqrt(1 - beta2^t) / (1 - beta1^t)
// (bias correction folded into the step), p -= step * r * u. The per-tensor
// norms need whole tensors: the plugin declares
// DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS, so the host never hands it ZeRO slices.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace dscore::lamb {
namespace {

using sdk::Error;

// FusedLamb's defaults (docs/deepspeed-reference.md#fusedlamb).
constexpr const char kSchema[] = R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "bias_correction": {"type": "bool", "default": true,
                      "doc": "fold sqrt(1 - beta2^t) / (1 - beta1^t) into the step size"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999], "auto": "default",
            "doc": "coefficients of the running averages of the gradient and its square, each in [0, 1)"},
  "eps": {"type": "number", "default": 1e-8, "min": 0, "auto": "default",
          "doc": "added to the denominator (outside the sqrt unless eps_inside_sqrt)"},
  "eps_inside_sqrt": {"type": "bool", "default": false,
                      "doc": "use sqrt(v + eps) instead of sqrt(v) + eps"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "weight_decay * param is added to the update before the trust ratio"},
  "max_coeff": {"type": "number", "default": 10.0, "min": 0,
                "doc": "upper bound of the trust ratio |p| / |update|"},
  "min_coeff": {"type": "number", "default": 0.01, "min": 0,
                "doc": "lower bound of the trust ratio"},
  "amsgrad": {"type": "bool", "default": false,
              "doc": "must be false: FusedLamb does not support AMSGrad"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";

class Lamb : public sdk::OptimizerBase {
 public:
  Lamb(sdk::HostRef host, const sdk::Params& p);
  void step(const dscore_optimizer_step_args* args) const;

  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  double max_coeff = 10, min_coeff = 0.01;
  bool bias_correction = true, eps_inside_sqrt = false;
};

Lamb::Lamb(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
  const sdk::AdamFamilyParams a =
      sdk::read_adam_family(p, "DeepSpeed's FusedLamb does not support the AMSGrad variant either");
  beta1 = a.beta1;
  beta2 = a.beta2;
  eps = a.eps;
  weight_decay = a.weight_decay;
  max_coeff = p.number("max_coeff");
  min_coeff = p.number("min_coeff");
  bias_correction = p.boolean("bias_correction");
  eps_inside_sqrt = p.boolean("eps_inside_sqrt");
  sdk::check_non_negative(weight_decay, "weight_decay");
  sdk::check_non_negative(min_coeff, "min_coeff");
  if (!(max_coeff >= min_coeff))
    throw Error(DSCORE_INVALID_ARGUMENT,
                "max_coeff = " + sdk::format_number(max_coeff) +
                    " must be >= min_coeff = " + sdk::format_number(min_coeff));
  declare_slot("exp_avg");
  declare_slot("exp_avg_sq");
}

struct Constants {
  float beta1, beta2, eps, weight_decay, grad_scale;
  bool eps_inside_sqrt;
};

inline float lamb_update(const Constants& k, float p, float m, float v) {
  const float denom = k.eps_inside_sqrt ? std::sqrt(v + k.eps) : std::sqrt(v) + k.eps;
  return m / denom + k.weight_decay * p;
}

// Pass 1 writes the moments and returns |p|^2 and |u|^2 (in double); pass 2
// recomputes u from the stored moments and the untouched p and applies it.
template <dscore_dtype G, dscore_dtype P16>
void lamb_tensor(const Lamb& s, const Constants& k, float step_size, int64_t n, float* param,
                 const void* grad, float* exp_avg, float* exp_avg_sq, void* out16) {
  double w_norm_sq = 0, u_norm_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = sdk::load_as_float<G>(grad, i) * k.grad_scale;
    const float m = k.beta1 * exp_avg[i] + (1.0f - k.beta1) * g;
    const float v = k.beta2 * exp_avg_sq[i] + (1.0f - k.beta2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const double u = lamb_update(k, param[i], m, v);
    w_norm_sq += static_cast<double>(param[i]) * param[i];
    u_norm_sq += u * u;
  }
  double ratio = 1.0;
  if (w_norm_sq != 0 && u_norm_sq != 0) ratio = std::sqrt(w_norm_sq) / std::sqrt(u_norm_sq);
  ratio = std::clamp(ratio, s.min_coeff, s.max_coeff);  // after the zero-norm rule, as DeepSpeed
  const float scaled_step = static_cast<float>(step_size * ratio);
  for (int64_t i = 0; i < n; ++i) {
    const float p = param[i] - scaled_step * lamb_update(k, param[i], exp_avg[i], exp_avg_sq[i]);
    param[i] = p;
    sdk::store_from_float<P16>(out16, i, p);
  }
}

void Lamb::step(const dscore_optimizer_step_args* args) const {
  const Lamb& self = *this;
  const sdk::StepHparams h =
      sdk::read_checked_hparams(args, self.beta1, self.beta2, self.bias_correction);
  // FusedLamb's arithmetic: corrections from the fp32 betas, the step size in fp32.
  const float beta1 = static_cast<float>(h.beta1), beta2 = static_cast<float>(h.beta2);
  const float lr = static_cast<float>(h.lr);
  const float step_size = self.bias_correction
                              ? lr * std::sqrt(sdk::fp32_bias_correction(beta2, h.step)) /
                                    sdk::fp32_bias_correction(beta1, h.step)
                              : lr;
  const Constants k{beta1,
                    beta2,
                    static_cast<float>(self.eps),
                    static_cast<float>(self.weight_decay * h.weight_decay_multiplier),
                    static_cast<float>(h.grad_scale),
                    self.eps_inside_sqrt};
  sdk::CpuStepTensors tensors(args, 2, "lamb");
  for (size_t i = 0; i < tensors.count(); ++i) {
    tensors.with_dtypes(i, [&](auto g, auto o) {
      lamb_tensor<decltype(g)::value, decltype(o)::value>(
          self, k, step_size, tensors.numel(i), tensors.param(i), tensors.grad(i)->data,
          tensors.state(0, i), tensors.state(1, i), tensors.param_16bit_data(i));
    });
  }
}

const dscore_plugin_descriptor kLamb =
    sdk::optimizer_descriptor<Lamb>("lamb", "0.1.0",
                                    "LAMB: Adam moments with a per-tensor trust ratio clamped "
                                    "to [min_coeff, max_coeff] (FusedLamb)",
                                    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 |
                                        DSCORE_CAP_BF16 | DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS,
                                    kSchema);

}  // namespace
}  // namespace dscore::lamb

DSCORE_PLUGIN_LIBRARY("dscore-lamb", "0.1.0", "dscore", &dscore::lamb::kLamb)
