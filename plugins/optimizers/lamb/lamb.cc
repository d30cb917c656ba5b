// The "lamb" optimizer: DeepSpeed's FusedLamb (docs/deepspeed-reference.md#fusedlamb). Per
// parameter TENSOR: Adam moments without bias correction inside, update
// u = m / (sqrt(v) + eps) + wd p (eps inside the sqrt when eps_inside_sqrt),
// trust ratio r = |p| / |u| (1 when either norm is 0) clamped to
// [min_coeff, max_coeff], step size lr sqrt(1 - beta2^t) / (1 - beta1^t)
// (bias correction folded into the step), p -= step * r * u. The per-tensor
// norms need whole tensors: the plugin declares
// DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS, so the host never hands it ZeRO slices.
// CPU tensors run lamb_update.h; CUDA tensors the multi-tensor kernels of
// lamb_cuda.h (when built with CUDA), bit-identical to the CPU path.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "lamb_update.h"
#if defined(DSCORE_LAMB_WITH_CUDA)
#include "lamb_cuda.h"
#endif

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

// ---------------------------------------------------------------- step

#if defined(DSCORE_LAMB_WITH_CUDA)
constexpr bool kHasCuda = true;
#else
constexpr bool kHasCuda = false;
#endif

bool on_cuda(const dscore_tensor* t) { return sdk::is_cuda_tensor(t); }

LambTensor checked_tensor(const dscore_optimizer_step_args* args, size_t i) {
  const size_t n = args->tensor_count;
  dscore_tensor* param = args->params[i];
  sdk::check_dense_tensor(param, "param", i, -1);
  if (on_cuda(param) && !kHasCuda)
    throw Error(DSCORE_INVALID_ARGUMENT,
                sdk::tensor_label(param, "param", i) +
                    " is in CUDA memory but this lamb plugin was built without CUDA (capabilities "
                    "CPU): rebuild dscore with DSCORE_WITH_CUDA=ON or use CPU optimizer offload");
  if (!on_cuda(param) && !sdk::is_cpu_addressable(param))
    throw Error(DSCORE_INVALID_ARGUMENT,
                sdk::tensor_label(param, "param", i) + " is on device type " +
                    std::to_string(param->device_type) + ": lamb runs on CPU" +
                    (kHasCuda ? " and CUDA" : "") + " tensors");
  if (param->dtype != DSCORE_DTYPE_F32)
    throw Error(DSCORE_INVALID_ARGUMENT, sdk::tensor_label(param, "param", i) + " is " +
                                             sdk::dtype_name(param->dtype) +
                                             ": master parameters must be fp32");
  const dscore_tensor* grad = args->grads[i];
  dscore_tensor* m = args->states[0 * n + i];
  dscore_tensor* v = args->states[1 * n + i];
  sdk::check_beside_param(grad, "grad", i, param);
  sdk::check_beside_param(m, "exp_avg", i, param);
  sdk::check_beside_param(v, "exp_avg_sq", i, param);
  if (!sdk::is_float_dtype(grad->dtype))
    throw Error(DSCORE_INVALID_ARGUMENT, sdk::tensor_label(grad, "grad", i) + " is " +
                                             sdk::dtype_name(grad->dtype) +
                                             ": lamb accepts fp32, bf16 and fp16 gradients");
  if (m->dtype != DSCORE_DTYPE_F32 || v->dtype != DSCORE_DTYPE_F32)
    throw Error(DSCORE_INVALID_ARGUMENT, "state of " + sdk::tensor_label(param, "param", i) +
                                             " is not fp32 as declared by state_slots()");
  dscore_tensor* out16 = args->params_16bit != nullptr ? args->params_16bit[i] : nullptr;
  if (out16 != nullptr) {
    sdk::check_beside_param(out16, "params_16bit", i, param);
    if (!sdk::is_float_dtype(out16->dtype))
      throw Error(DSCORE_INVALID_ARGUMENT, sdk::tensor_label(out16, "params_16bit", i) + " is " +
                                               sdk::dtype_name(out16->dtype) +
                                               ": expected bf16, fp16 or fp32");
  }
  return LambTensor{static_cast<float*>(param->data),
                    grad->data,
                    static_cast<float*>(m->data),
                    static_cast<float*>(v->data),
                    out16 != nullptr ? out16->data : nullptr,
                    param->numel,
                    grad->dtype,
                    out16 != nullptr ? out16->dtype : DSCORE_DTYPE_INVALID};
}

void Lamb::step(const dscore_optimizer_step_args* args) const {
  const Lamb& self = *this;
  const sdk::StepHparams h =
      sdk::read_checked_hparams(args, self.beta1, self.beta2, self.bias_correction);
  if (args->slot_count != 2)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "step: expected 2 state slots (exp_avg, exp_avg_sq), got " +
                    std::to_string(args->slot_count));
  // FusedLamb's arithmetic: corrections from the fp32 betas, the step size in fp32.
  const float beta1 = static_cast<float>(h.beta1), beta2 = static_cast<float>(h.beta2);
  const float lr = static_cast<float>(h.lr);
  const float step_size = self.bias_correction
                              ? lr * std::sqrt(sdk::fp32_bias_correction(beta2, h.step)) /
                                    sdk::fp32_bias_correction(beta1, h.step)
                              : lr;
  const LambConstants k{beta1,
                        beta2,
                        static_cast<float>(self.eps),
                        static_cast<float>(self.weight_decay * h.weight_decay_multiplier),
                        static_cast<float>(h.grad_scale),
                        step_size,
                        self.min_coeff,
                        self.max_coeff,
                        self.eps_inside_sqrt};
  std::vector<LambTensor> cpu, cuda;
  for (size_t i = 0; i < args->tensor_count; ++i)
    (on_cuda(args->params[i]) ? cuda : cpu).push_back(checked_tensor(args, i));
    // CUDA work is enqueued first so it overlaps the CPU loop.
#if defined(DSCORE_LAMB_WITH_CUDA)
  if (!cuda.empty()) lamb_step_cuda(k, cuda.data(), cuda.size(), args->stream);
#endif
  for (const LambTensor& t : cpu)
    sdk::with_float_dtype(t.grad_dtype, [&](auto g) {
      sdk::with_output_dtype(t.out16_dtype, [&](auto o) {
        lamb_tensor_cpu<decltype(g)::value, decltype(o)::value>(k, t);
      });
    });
}

const dscore_plugin_descriptor kLamb = sdk::optimizer_descriptor<Lamb>(
    "lamb", "0.1.0",
    "LAMB: Adam moments with a per-tensor trust ratio clamped "
    "to [min_coeff, max_coeff] (FusedLamb)",
    DSCORE_CAP_CPU | (kHasCuda ? DSCORE_CAP_CUDA : 0) | DSCORE_CAP_F32 | DSCORE_CAP_F16 |
        DSCORE_CAP_BF16 | DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS,
    kSchema);

}  // namespace
}  // namespace dscore::lamb

DSCORE_PLUGIN_LIBRARY("dscore-lamb", "0.1.0", "dscore", &dscore::lamb::kLamb)
