// The "adagrad" optimizer: torch.optim.Adagrad's semantics, which is what
// DeepSpeed builds for "type": "Adagrad" (DeepSpeedCPUAdagrad under CPU
// offload computes the same with lr_decay 0): clr = lr / (1 + (step - 1) *
// lr_decay); g += weight_decay * p; sum += g * g; p -= clr * g / (sqrt(sum)
// + eps). The accumulator "sum" is host-owned fp32 state whose initial value
// is initial_accumulator_value. No betas: a scheduler's beta override is
// ignored, as DeepSpeed's OneCycle disables momentum cycling for Adagrad.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <memory>
#include <string>

DSCORE_PLUGIN_HOST_STORAGE;

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

struct Adagrad {
  double lr_decay = 0;
  double weight_decay = 0;
  double eps = 0;
  bool maximize = false;
  dscore_optimizer_state_slot slot{};
  const dscore_optimizer_state_slot* slots[1] = {&slot};
};

Adagrad* self_of(dscore_optimizer* p) { return reinterpret_cast<Adagrad*>(p); }

dscore_status create(const dscore_create_args* args, dscore_optimizer** out) {
  return sdk::guard([&] {
    sdk::Params p(args);
    auto self = std::make_unique<Adagrad>();
    sdk::check_non_negative(p.number("lr"), "lr");
    self->lr_decay = p.number("lr_decay");
    self->weight_decay = p.number("weight_decay");
    self->eps = p.number("eps");
    self->maximize = p.boolean("maximize");
    const double initial = p.number("initial_accumulator_value");
    sdk::check_non_negative(self->lr_decay, "lr_decay");
    sdk::check_non_negative(self->weight_decay, "weight_decay");
    sdk::check_non_negative(self->eps, "eps");
    sdk::check_non_negative(initial, "initial_accumulator_value");
    self->slot = {sizeof(dscore_optimizer_state_slot), "sum", DSCORE_DTYPE_F32, 1, initial};
    *out = reinterpret_cast<dscore_optimizer*>(self.release());
  });
}

void destroy(dscore_optimizer* self) {
  sdk::guard([&] { delete self_of(self); });
}

dscore_status state_slots(const dscore_optimizer* opaque,
                          const dscore_optimizer_state_slot* const** slots, size_t* count) {
  return sdk::guard([&] {
    *slots = reinterpret_cast<const Adagrad*>(opaque)->slots;
    *count = 1;
  });
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

dscore_status step(dscore_optimizer* opaque, const dscore_optimizer_step_args* args) {
  return sdk::guard([&] {
    const Adagrad& self = *self_of(opaque);
    const sdk::StepHparams h = sdk::read_hparams(args, 0, 0);
    if (h.step < 1)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "step: hparams->step = " + std::to_string(h.step) + " must be >= 1 (1-based)");
    sdk::CpuStepTensors tensors(args, 1, "adagrad");
    for (size_t i = 0; i < tensors.count(); ++i) {
      tensors.with_dtypes(i, [&](auto g, auto o) {
        adagrad_tensor<decltype(g)::value, decltype(o)::value>(
            self, h, tensors.numel(i), tensors.param(i), tensors.grad(i)->data,
            tensors.state(0, i), tensors.param_16bit_data(i));
      });
    }
  });
}

dscore_optimizer_vtable make_vtable() {
  dscore_optimizer_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = &create;
  vt.destroy = &destroy;
  vt.state_slots = &state_slots;
  vt.step = &step;
  return vt;
}
const dscore_optimizer_vtable kVtable = make_vtable();

const dscore_plugin_descriptor kAdagrad = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_OPTIMIZER,
    "adagrad",
    "0.1.0",
    "Adagrad with lr decay, L2 weight decay and an initial accumulator (torch.optim.Adagrad)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16,
    kSchema,
    &kVtable};
const dscore_plugin_descriptor* const kPlugins[] = {&kAdagrad};

const dscore_plugin_library kLibrary = sdk::plugin_library("dscore-adagrad", "0.1.0", "dscore", kPlugins);

}  // namespace
}  // namespace dscore::adagrad

extern "C" DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &dscore::adagrad::kLibrary;
}
