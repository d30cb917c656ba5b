// The built-in Adam optimizers, "adam" and "adamw", with DeepSpeed's
// semantics (REFERENCE.md 3.1-3.3): "adam" is AdamW unless adam_w_mode is
// false, "adamw" always decouples weight decay; the math is FusedAdam's
// (adam_update.h). CPU tensors only; state is host-owned (exp_avg,
// exp_avg_sq: fp32, one per parameter element).
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>
#include <dscore/optimizer.h>

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "adam_update.h"

DSCORE_PLUGIN_HOST_STORAGE;

namespace dscore::adam {
namespace {

using sdk::Error;

// Shared by "adam" and "adamw". Defaults are FusedAdam's (REFERENCE.md 3.2);
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

struct AdamOptimizer {
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  bool bias_correction;
  bool adamw;
};

AdamOptimizer* self_of(dscore_optimizer* p) { return reinterpret_cast<AdamOptimizer*>(p); }

// Shortest round-trip text, so messages show the value the user wrote.
std::string format_number(double v) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, result.ptr);
}

void check_beta(double beta, const std::string& what) {
  if (!(beta >= 0.0 && beta < 1.0))
    throw Error(DSCORE_INVALID_ARGUMENT,
                what + " = " + format_number(beta) + " is out of range: each beta must be in [0, 1)");
}

AdamOptimizer* create_common(const dscore_create_args* args, bool always_adamw) {
  sdk::Params p(args);
  if (p.boolean("amsgrad"))
    throw Error(DSCORE_INVALID_ARGUMENT,
                "amsgrad is not supported (DeepSpeed's FusedAdam rejects it too); remove "
                "\"amsgrad\" or set it to false");
  double lr = p.number("lr");
  if (!(lr >= 0.0))
    throw Error(DSCORE_INVALID_ARGUMENT, "lr = " + format_number(lr) + " must be >= 0");
  std::vector<double> betas = p.numbers("betas");
  if (betas.size() != 2)
    throw Error(DSCORE_INVALID_ARGUMENT, "betas must be a list of two numbers [beta1, beta2], got " +
                                             std::to_string(betas.size()));
  check_beta(betas[0], "betas[0]");
  check_beta(betas[1], "betas[1]");
  double eps = p.number("eps");
  if (!(eps >= 0.0))
    throw Error(DSCORE_INVALID_ARGUMENT, "eps = " + format_number(eps) + " must be >= 0");
  if (p.boolean("torch_adam"))
    sdk::log(DSCORE_LOG_INFO, "adam",
             "torch_adam has no effect in dscore: the same (FusedAdam) math is used");

  auto* self = new AdamOptimizer{};
  self->beta1 = betas[0];
  self->beta2 = betas[1];
  self->eps = eps;
  self->weight_decay = p.number("weight_decay");
  self->bias_correction = p.boolean("bias_correction");
  self->adamw = always_adamw || p.boolean("adam_w_mode");
  return self;
}

dscore_status create_adam(const dscore_create_args* args, dscore_optimizer** out) {
  return sdk::guard([&] { *out = reinterpret_cast<dscore_optimizer*>(create_common(args, false)); });
}

dscore_status create_adamw(const dscore_create_args* args, dscore_optimizer** out) {
  return sdk::guard([&] { *out = reinterpret_cast<dscore_optimizer*>(create_common(args, true)); });
}

void destroy(dscore_optimizer* self) {
  sdk::guard([&] { delete self_of(self); });
}

const dscore_optimizer_state_slot kExpAvg = {sizeof(dscore_optimizer_state_slot), "exp_avg",
                                             DSCORE_DTYPE_F32, 1, 0.0};
const dscore_optimizer_state_slot kExpAvgSq = {sizeof(dscore_optimizer_state_slot), "exp_avg_sq",
                                               DSCORE_DTYPE_F32, 1, 0.0};
const dscore_optimizer_state_slot* const kSlots[] = {&kExpAvg, &kExpAvgSq};

dscore_status state_slots(const dscore_optimizer*, const dscore_optimizer_state_slot* const** slots,
                          size_t* count) {
  return sdk::guard([&] {
    *slots = kSlots;
    *count = 2;
  });
}

// ---------------------------------------------------------------- step

std::string tensor_label(const dscore_tensor* t, const char* role, size_t i) {
  std::string label = std::string(role) + " " + std::to_string(i);
  if (t != nullptr && t->name != nullptr) label += " ('" + std::string(t->name) + "')";
  return label;
}

void check_tensor(const dscore_tensor* t, const char* role, size_t i, int64_t numel) {
  if (t == nullptr || (t->data == nullptr && t->numel > 0))
    throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(t, role, i) + " is NULL");
  if (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST)
    throw Error(DSCORE_INVALID_ARGUMENT,
                tensor_label(t, role, i) +
                    " is not in CPU memory: the adam plugin runs on CPU tensors only "
                    "(capabilities CPU); use CPU optimizer offload");
  if (t->strides != nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(t, role, i) + " is not dense (strides set)");
  if (numel >= 0 && t->numel != numel)
    throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(t, role, i) + " has " +
                                             std::to_string(t->numel) + " elements, expected " +
                                             std::to_string(numel));
}

using UpdateFn = void (*)(const AdamConstants&, int64_t, float*, const void*, float*, float*,
                          void*);

template <dscore_dtype G>
UpdateFn pick_16bit(dscore_dtype out16) {
  switch (out16) {
    case DSCORE_DTYPE_INVALID: return &adam_update<G, DSCORE_DTYPE_INVALID>;
    case DSCORE_DTYPE_F32: return &adam_update<G, DSCORE_DTYPE_F32>;
    case DSCORE_DTYPE_BF16: return &adam_update<G, DSCORE_DTYPE_BF16>;
    case DSCORE_DTYPE_F16: return &adam_update<G, DSCORE_DTYPE_F16>;
    default: return nullptr;
  }
}

UpdateFn pick_update(dscore_dtype grad, dscore_dtype out16) {
  switch (grad) {
    case DSCORE_DTYPE_F32: return pick_16bit<DSCORE_DTYPE_F32>(out16);
    case DSCORE_DTYPE_BF16: return pick_16bit<DSCORE_DTYPE_BF16>(out16);
    case DSCORE_DTYPE_F16: return pick_16bit<DSCORE_DTYPE_F16>(out16);
    default: return nullptr;
  }
}

dscore_status step(dscore_optimizer* opaque, const dscore_optimizer_step_args* args) {
  return sdk::guard([&] {
    const AdamOptimizer& self = *self_of(opaque);
    const dscore_optimizer_hparams* h = args->hparams;
    if (h == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "step: hparams is NULL");
    using H = dscore_optimizer_hparams;
    uint32_t mask = DSCORE_HAS_FIELD(h, H, override_mask) ? h->override_mask : 0u;
    double beta1 = (mask & DSCORE_HPARAM_BETA1) && DSCORE_HAS_FIELD(h, H, beta1) ? h->beta1
                                                                                  : self.beta1;
    double beta2 = (mask & DSCORE_HPARAM_BETA2) && DSCORE_HAS_FIELD(h, H, beta2) ? h->beta2
                                                                                  : self.beta2;
    check_beta(beta1, "hparams->beta1 (scheduler override)");
    check_beta(beta2, "hparams->beta2 (scheduler override)");
    double wd_multiplier =
        DSCORE_HAS_FIELD(h, H, weight_decay_multiplier) ? h->weight_decay_multiplier : 1.0;
    int64_t t = DSCORE_HAS_FIELD(h, H, step) ? h->step : 0;
    double grad_scale = DSCORE_HAS_FIELD(h, H, grad_scale) ? h->grad_scale : 1.0;
    if (self.bias_correction && t < 1)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "step: hparams->step = " + std::to_string(t) + " must be >= 1 (1-based)");

    AdamConstants k{};
    k.lr = static_cast<float>(h->lr);
    k.beta1 = static_cast<float>(beta1);
    k.beta2 = static_cast<float>(beta2);
    k.eps = static_cast<float>(self.eps);
    k.weight_decay = static_cast<float>(self.weight_decay * wd_multiplier);
    // Computed in double and handed to the fp32 math, as FusedAdam does.
    k.bias_correction1 =
        self.bias_correction ? static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(t))) : 1.0f;
    k.bias_correction2 =
        self.bias_correction ? static_cast<float>(1.0 - std::pow(beta2, static_cast<double>(t))) : 1.0f;
    k.grad_scale = static_cast<float>(grad_scale);
    k.adamw = self.adamw;

    if (args->slot_count != 2)
      throw Error(DSCORE_INVALID_ARGUMENT, "step: expected 2 state slots (exp_avg, exp_avg_sq), got " +
                                               std::to_string(args->slot_count));
    const size_t n = args->tensor_count;
    for (size_t i = 0; i < n; ++i) {
      dscore_tensor* param = args->params[i];
      check_tensor(param, "param", i, -1);
      if (param->dtype != DSCORE_DTYPE_F32)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    tensor_label(param, "param", i) + " is " + sdk::dtype_name(param->dtype) +
                        ": master parameters must be fp32");
      const int64_t numel = param->numel;
      const dscore_tensor* grad = args->grads[i];
      check_tensor(grad, "grad", i, numel);
      dscore_tensor* m = args->states[0 * n + i];
      dscore_tensor* v = args->states[1 * n + i];
      check_tensor(m, "exp_avg", i, numel);
      check_tensor(v, "exp_avg_sq", i, numel);
      if (m->dtype != DSCORE_DTYPE_F32 || v->dtype != DSCORE_DTYPE_F32)
        throw Error(DSCORE_INVALID_ARGUMENT, "state of " + tensor_label(param, "param", i) +
                                                 " is not fp32 as declared by state_slots()");
      dscore_tensor* out16 = args->params_16bit != nullptr ? args->params_16bit[i] : nullptr;
      if (out16 != nullptr) check_tensor(out16, "params_16bit", i, numel);
      UpdateFn update = pick_update(grad->dtype, out16 ? out16->dtype : DSCORE_DTYPE_INVALID);
      if (update == nullptr)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    tensor_label(grad, "grad", i) + " is " + sdk::dtype_name(grad->dtype) +
                        (out16 ? std::string(" with a ") + sdk::dtype_name(out16->dtype) + " params_16bit" : "") +
                        ": adam accepts fp32/bf16/fp16 gradients and bf16/fp16/fp32 16-bit copies");
      update(k, numel, static_cast<float*>(param->data), grad->data, static_cast<float*>(m->data),
             static_cast<float*>(v->data), out16 ? out16->data : nullptr);
    }
  });
}

// Value-initialised, then filled: functions this plugin does not offer stay
// NULL, also the ones a later ABI minor appends (no aggregate to update).
dscore_optimizer_vtable make_vtable(dscore_status (*create)(const dscore_create_args*,
                                                            dscore_optimizer**)) {
  dscore_optimizer_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = create;
  vt.destroy = &destroy;
  vt.state_slots = &state_slots;
  vt.step = &step;
  return vt;
}
const dscore_optimizer_vtable kAdamVtable = make_vtable(&create_adam);
const dscore_optimizer_vtable kAdamWVtable = make_vtable(&create_adamw);

constexpr uint64_t kCaps = DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16;

const dscore_plugin_descriptor kAdam = {
    sizeof(dscore_plugin_descriptor), DSCORE_KIND_OPTIMIZER, "adam", "0.1.0",
    "Adam with DeepSpeed semantics: decoupled weight decay (AdamW) unless adam_w_mode is false",
    kCaps, kParamsSchema, &kAdamVtable};
const dscore_plugin_descriptor kAdamW = {
    sizeof(dscore_plugin_descriptor), DSCORE_KIND_OPTIMIZER, "adamw", "0.1.0",
    "AdamW (decoupled weight decay), DeepSpeed FusedAdam math", kCaps, kParamsSchema,
    &kAdamWVtable};
const dscore_plugin_descriptor* const kPlugins[] = {&kAdam, &kAdamW};

const dscore_plugin_library kLibrary = {
    sizeof(dscore_plugin_library), DSCORE_ABI_VERSION_MAJOR, DSCORE_ABI_VERSION_MINOR, 0,
    "dscore-adam", "0.1.0", "dscore", &sdk::store_host, nullptr, 2, kPlugins};

}  // namespace
}  // namespace dscore::adam

extern "C" DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &dscore::adam::kLibrary;
}
