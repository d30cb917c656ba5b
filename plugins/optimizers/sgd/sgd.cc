// The "sgd" optimizer: torch.optim.SGD's semantics (what DeepSpeed builds for
// "type": "SGD"): momentum with dampening, Nesterov, L2 weight decay added to
// the gradient, maximize. The momentum buffer is host-owned state, declared
// only when momentum != 0; on the first applied update it is the gradient
// itself (torch's clone), afterwards momentum * buf + (1 - dampening) * g.
// DeepSpeed's OneCycle does not cycle momentum for SGD (no betas), so a
// scheduler's beta override is ignored here too.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/plugin.hpp>

#include <memory>
#include <string>

DSCORE_PLUGIN_HOST_STORAGE;

namespace dscore::sgd {
namespace {

using sdk::Error;

constexpr const char kSchema[] = R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "momentum": {"type": "number", "default": 0, "min": 0,
               "doc": "momentum factor; 0 = plain SGD (no state)"},
  "dampening": {"type": "number", "default": 0,
                "doc": "the new gradient enters the momentum buffer times (1 - dampening)"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "L2 penalty: weight_decay * param is added to the gradient"},
  "nesterov": {"type": "bool", "default": false,
               "doc": "Nesterov momentum (needs momentum > 0 and dampening 0)"},
  "maximize": {"type": "bool", "default": false,
               "doc": "maximize the objective instead of minimizing it"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";

struct Sgd {
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool warned_overrides = false;
  dscore_optimizer_state_slot slot{};
  const dscore_optimizer_state_slot* slots[1] = {&slot};
};

Sgd* self_of(dscore_optimizer* p) { return reinterpret_cast<Sgd*>(p); }
const Sgd* self_of(const dscore_optimizer* p) { return reinterpret_cast<const Sgd*>(p); }

dscore_status create(const dscore_create_args* args, dscore_optimizer** out) {
  return sdk::guard([&] {
    sdk::Params p(args);
    sdk::check_non_negative(p.number("lr"), "lr");
    auto self = std::make_unique<Sgd>();
    self->momentum = p.number("momentum");
    self->dampening = p.number("dampening");
    self->weight_decay = p.number("weight_decay");
    self->nesterov = p.boolean("nesterov");
    self->maximize = p.boolean("maximize");
    sdk::check_non_negative(self->momentum, "momentum");
    sdk::check_non_negative(self->weight_decay, "weight_decay");
    if (self->nesterov && (self->momentum <= 0 || self->dampening != 0))
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "Nesterov momentum requires a momentum and zero dampening: set \"momentum\" > 0 "
                  "and \"dampening\": 0, or \"nesterov\": false");
    self->slot = {sizeof(dscore_optimizer_state_slot), "momentum_buffer", DSCORE_DTYPE_F32, 1, 0.0};
    *out = reinterpret_cast<dscore_optimizer*>(self.release());
  });
}

void destroy(dscore_optimizer* self) {
  sdk::guard([&] { delete self_of(self); });
}

dscore_status state_slots(const dscore_optimizer* opaque,
                          const dscore_optimizer_state_slot* const** slots, size_t* count) {
  return sdk::guard([&] {
    const Sgd* self = self_of(opaque);
    *slots = self->slots;
    *count = self->momentum != 0 ? 1 : 0;
  });
}

// torch's _single_tensor_sgd for elements [0, n), in fp32.
template <dscore_dtype G, dscore_dtype P16>
void sgd_tensor(const Sgd& s, const sdk::StepHparams& h, bool first, int64_t n, float* param,
                const void* grad, float* buf, void* out16) {
  const float lr = static_cast<float>(h.lr);
  const float scale = static_cast<float>(s.maximize ? -h.grad_scale : h.grad_scale);
  const float wd = static_cast<float>(s.weight_decay * h.weight_decay_multiplier);
  const float momentum = static_cast<float>(s.momentum);
  const float keep = static_cast<float>(1.0 - s.dampening);
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = sdk::load_as_float<G>(grad, i) * scale;
    if (wd != 0) g += wd * p;
    if (buf != nullptr) {
      const float b = first ? g : momentum * buf[i] + keep * g;
      buf[i] = b;
      g = s.nesterov ? g + momentum * b : b;
    }
    p -= lr * g;
    param[i] = p;
    sdk::store_from_float<P16>(out16, i, p);
  }
}

dscore_status step(dscore_optimizer* opaque, const dscore_optimizer_step_args* args) {
  return sdk::guard([&] {
    Sgd& self = *self_of(opaque);
    const sdk::StepHparams h = sdk::read_hparams(args, 0, 0);
    if (h.step < 1)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "step: hparams->step = " + std::to_string(h.step) + " must be >= 1 (1-based)");
    if ((h.override_mask & (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2)) && !self.warned_overrides) {
      self.warned_overrides = true;
      sdk::log(DSCORE_LOG_WARNING, "sgd",
               "the LR scheduler sets momentum (beta1/beta2), which sgd ignores: as in DeepSpeed, "
               "momentum cycling is disabled for an optimizer without betas");
    }
    const bool has_buffer = self.momentum != 0;
    sdk::CpuStepTensors tensors(args, has_buffer ? 1 : 0, "sgd");
    for (size_t i = 0; i < tensors.count(); ++i) {
      tensors.with_dtypes(i, [&](auto g, auto o) {
        sgd_tensor<decltype(g)::value, decltype(o)::value>(
            self, h, h.step == 1, tensors.numel(i), tensors.param(i), tensors.grad(i)->data,
            has_buffer ? tensors.state(0, i) : nullptr, tensors.param_16bit_data(i));
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

const dscore_plugin_descriptor kSgd = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_OPTIMIZER,
    "sgd",
    "0.1.0",
    "SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD semantics)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16,
    kSchema,
    &kVtable};
const dscore_plugin_descriptor* const kPlugins[] = {&kSgd};

const dscore_plugin_library kLibrary = sdk::plugin_library("dscore-sgd", "0.1.0", "dscore", kPlugins);

}  // namespace
}  // namespace dscore::sgd

extern "C" DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &dscore::sgd::kLibrary;
}
