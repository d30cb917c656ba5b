// The built-in Adam optimizers, "adam" and "adamw", with DeepSpeed's
// semantics (docs/deepspeed-reference.md#optimizer-names, #fusedadam): "adam"
// is AdamW unless adam_w_mode is
// false, "adamw" always decouples weight decay; the math is FusedAdam's
// (adam_update.h). CPU tensors run the vectorised multi-core loop
// (adam_cpu.h: AVX-512, AVX2 or scalar, chosen at run time), CUDA tensors
// the multi-tensor kernel (adam_cuda.h, when built with CUDA). State is
// host-owned (exp_avg, exp_avg_sq: fp32, one per parameter element).
#include <dscore/optimizer.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "../adam_common/adam_update.h"
#include "adam_cpu.h"
#if defined(DSCORE_ADAM_WITH_CUDA)
#include "adam_cuda.h"
#endif

namespace dscore::adam {
namespace {

using sdk::Error;
using sdk::format_number;

#if defined(DSCORE_ADAM_WITH_CUDA)
constexpr bool kHasCuda = true;
#else
constexpr bool kHasCuda = false;
#endif

// Shared by "adam" and "adamw". Defaults are FusedAdam's (docs/deepspeed-reference.md#fusedadam);
// the host fills them, so create() reads every parameter without fallbacks.
constexpr const char kParamsSchema[] = R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999], "auto": "default",
            "doc": "coefficients of the running averages of the gradient and its square, each in [0, 1)"},
  "eps": {"type": "number", "default": 1e-8, "min": 0, "auto": "default",
          "doc": "added to the denominator, outside the square root, after bias correction"},
  "weight_decay": {"type": "number", "default": 0, "auto": "default",
                   "doc": "decoupled (AdamW) or L2 weight decay, see adam_w_mode"},
  "bias_correction": {"type": "bool", "default": true,
                      "doc": "divide the moments by 1 - beta^step"},
  "adam_w_mode": {"type": "bool", "default": true,
                  "doc": "\"adam\": true = decoupled weight decay (AdamW, DeepSpeed's default), false = L2 added to the gradient; \"adamw\" always decouples"},
  "torch_adam": {"type": "bool", "default": false,
                 "doc": "accepted for DeepSpeed compatibility; no effect (dscore has one Adam implementation, numerically FusedAdam)"},
  "amsgrad": {"type": "bool", "default": false,
              "doc": "must be false: AMSGrad is not supported (DeepSpeed's FusedAdam rejects it too)"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";

class Adam : public sdk::OptimizerBase {
 public:
  Adam(sdk::HostRef host, const sdk::Params& p, bool always_adamw = false) : OptimizerBase(host) {
    const sdk::AdamFamilyParams a =
        sdk::read_adam_family(p, "DeepSpeed's FusedAdam rejects it too");
    if (p.boolean("torch_adam"))
      host.log(DSCORE_LOG_INFO, "adam",
               "torch_adam has no effect in dscore: the same (FusedAdam) math is used");
    beta1 = a.beta1;
    beta2 = a.beta2;
    eps = a.eps;
    weight_decay = a.weight_decay;
    bias_correction = p.boolean("bias_correction");
    adamw = always_adamw || p.boolean("adam_w_mode");
    declare_slot("exp_avg");
    declare_slot("exp_avg_sq");
    // Which kernel CPU tensors get, so a log says what a timing measured
    // (the bench reads this line). All kernels give the same bits.
    std::string kernel = std::string("CPU tensors use the ") + isa_name(best_isa()) + " kernel";
    if (best_isa() != cpu_isa())
      kernel += std::string(" (DSCORE_CPU_ISA lowered it from ") + isa_name(cpu_isa()) + ")";
    host.log(DSCORE_LOG_INFO, "adam", kernel);
  }
  void step(const dscore_optimizer_step_args* args) const;

  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool bias_correction = true;
  bool adamw = true;
};

// "adamw": Adam with decoupled weight decay whatever adam_w_mode says.
class AdamW : public Adam {
 public:
  AdamW(sdk::HostRef host, const sdk::Params& p) : Adam(host, p, true) {}
};

// ---------------------------------------------------------------- step

// A CUDA tensor or a CPU-addressable one, checked; all four of a tensor
// (param, grad, states) and its 16-bit copy must live on the same side
// (sdk::check_beside_param).
bool on_cuda(const dscore_tensor* t) { return sdk::is_cuda_tensor(t); }

AdamTensor checked_tensor(const dscore_optimizer_step_args* args, size_t i) {
  const size_t n = args->tensor_count;
  dscore_tensor* param = args->params[i];
  sdk::check_dense_tensor(param, "param", i, -1);
  const bool cuda = on_cuda(param);
  if (!cuda && !sdk::is_cpu_addressable(param))
    throw Error(DSCORE_INVALID_ARGUMENT,
                sdk::tensor_label(param, "param", i) + " is on device type " +
                    std::to_string(param->device_type) + ": adam runs on CPU" +
                    (kHasCuda ? " and CUDA" : "") + " tensors");
  if (cuda && !kHasCuda)
    throw Error(DSCORE_INVALID_ARGUMENT,
                sdk::tensor_label(param, "param", i) +
                    " is in CUDA memory but this adam plugin was built without CUDA (capabilities "
                    "CPU): rebuild dscore with DSCORE_WITH_CUDA=ON or use CPU optimizer offload");
  if (param->dtype != DSCORE_DTYPE_F32)
    throw Error(DSCORE_INVALID_ARGUMENT, sdk::tensor_label(param, "param", i) + " is " +
                                             sdk::dtype_name(param->dtype) +
                                             ": master parameters must be fp32");
  const int64_t numel = param->numel;
  const dscore_tensor* grad = args->grads[i];
  dscore_tensor* m = args->states[0 * n + i];
  dscore_tensor* v = args->states[1 * n + i];
  sdk::check_beside_param(grad, "grad", i, param);
  sdk::check_beside_param(m, "exp_avg", i, param);
  sdk::check_beside_param(v, "exp_avg_sq", i, param);
  if (m->dtype != DSCORE_DTYPE_F32 || v->dtype != DSCORE_DTYPE_F32)
    throw Error(DSCORE_INVALID_ARGUMENT, "state of " + sdk::tensor_label(param, "param", i) +
                                             " is not fp32 as declared by state_slots()");
  dscore_tensor* out16 = args->params_16bit != nullptr ? args->params_16bit[i] : nullptr;
  if (out16 != nullptr) sdk::check_beside_param(out16, "params_16bit", i, param);
  if (!sdk::is_float_dtype(grad->dtype) || (out16 != nullptr && !sdk::is_float_dtype(out16->dtype)))
    throw Error(
        DSCORE_INVALID_ARGUMENT,
        sdk::tensor_label(grad, "grad", i) + " is " + sdk::dtype_name(grad->dtype) +
            (out16 ? std::string(" with a ") + sdk::dtype_name(out16->dtype) + " params_16bit"
                   : "") +
            ": adam accepts fp32/bf16/fp16 gradients and bf16/fp16/fp32 16-bit copies");
  return AdamTensor{static_cast<float*>(param->data),
                    grad->data,
                    static_cast<float*>(m->data),
                    static_cast<float*>(v->data),
                    out16 ? out16->data : nullptr,
                    numel,
                    grad->dtype,
                    out16 ? out16->dtype : DSCORE_DTYPE_INVALID};
}

void Adam::step(const dscore_optimizer_step_args* args) const {
  const Adam& self = *this;
  const sdk::StepHparams h =
      sdk::read_checked_hparams(args, self.beta1, self.beta2, self.bias_correction);
  if (args->slot_count != 2)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "step: expected 2 state slots (exp_avg, exp_avg_sq), got " +
                    std::to_string(args->slot_count));

  AdamConstants k{};
  k.lr = static_cast<float>(h.lr);
  k.beta1 = static_cast<float>(h.beta1);
  k.beta2 = static_cast<float>(h.beta2);
  k.eps = static_cast<float>(self.eps);
  k.weight_decay = static_cast<float>(self.weight_decay * h.weight_decay_multiplier);
  // From the fp32 betas, raised in double and rounded once, as FusedAdam's
  // kernel computes them (docs/deepspeed-reference.md#fusedadam).
  k.bias_correction1 = self.bias_correction ? sdk::fp32_bias_correction(k.beta1, h.step) : 1.0f;
  k.bias_correction2 = self.bias_correction ? sdk::fp32_bias_correction(k.beta2, h.step) : 1.0f;
  k.grad_scale = static_cast<float>(h.grad_scale);
  k.adamw = self.adamw;

  std::vector<AdamTensor> cpu, cuda;
  for (size_t i = 0; i < args->tensor_count; ++i) {
    AdamTensor t = checked_tensor(args, i);
    (on_cuda(args->params[i]) ? cuda : cpu).push_back(t);
  }
  // CUDA work is enqueued first so it overlaps the CPU loop.
#if defined(DSCORE_ADAM_WITH_CUDA)
  if (!cuda.empty()) adam_step_cuda(k, cuda.data(), cuda.size(), args->stream);
#endif
  if (!cpu.empty()) adam_step_cpu(k, cpu.data(), cpu.size(), best_isa());
}

constexpr uint64_t kCaps = DSCORE_CAP_CPU | (kHasCuda ? DSCORE_CAP_CUDA : 0) | DSCORE_CAP_F32 |
                           DSCORE_CAP_F16 | DSCORE_CAP_BF16;

const dscore_plugin_descriptor kAdam = sdk::optimizer_descriptor<Adam>(
    "adam", "0.1.0",
    "Adam with DeepSpeed semantics: decoupled weight decay (AdamW) unless adam_w_mode is false",
    kCaps, kParamsSchema);
const dscore_plugin_descriptor kAdamW = sdk::optimizer_descriptor<AdamW>(
    "adamw", "0.1.0", "AdamW (decoupled weight decay), DeepSpeed FusedAdam math", kCaps,
    kParamsSchema);
const dscore_plugin_descriptor* const kPlugins[] = {&kAdam, &kAdamW};

dscore_status init(const dscore_host_api* host, dscore_host_context* library_context) {
  sdk::store_host(host, library_context);
  return sdk::guard(sdk::HostRef(library_context), [] { attach_cpu_threads(); });
}

void shutdown() {
  sdk::guard(sdk::HostRef(), [] { release_cpu_threads(); });
}

const dscore_plugin_library kLibrary =
    sdk::plugin_library("dscore-adam", "0.1.0", "dscore", kPlugins, &init, &shutdown);

}  // namespace
}  // namespace dscore::adam

DSCORE_PLUGIN_ENTRY(dscore::adam::kLibrary)
