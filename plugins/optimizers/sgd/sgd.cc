// The "sgd" optimizer: torch.optim.SGD's semantics (what DeepSpeed builds for
// "type": "SGD"): momentum with dampening, Nesterov, L2 weight decay added to
// the gradient, maximize. The momentum buffer is host-owned state, declared
// only when momentum != 0; on the first applied update it is the gradient
// itself (torch's clone), afterwards momentum * buf + (1 - dampening) * g.
// DeepSpeed's OneCycle does not cycle momentum for SGD (no betas), so a
// scheduler's beta override is ignored here too.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <memory>
#include <string>

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

class Sgd : public sdk::OptimizerBase {
 public:
  Sgd(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
    sdk::check_non_negative(p.number("lr"), "lr");
    momentum = p.number("momentum");
    dampening = p.number("dampening");
    weight_decay = p.number("weight_decay");
    nesterov = p.boolean("nesterov");
    maximize = p.boolean("maximize");
    sdk::check_non_negative(momentum, "momentum");
    sdk::check_non_negative(weight_decay, "weight_decay");
    if (nesterov && (momentum <= 0 || dampening != 0))
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "Nesterov momentum requires a momentum and zero dampening: set \"momentum\" > 0 "
                  "and \"dampening\": 0, or \"nesterov\": false");
    if (momentum != 0) declare_slot("momentum_buffer");
  }
  void step(const dscore_optimizer_step_args* args);

  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool warned_overrides = false;
};

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

void Sgd::step(const dscore_optimizer_step_args* args) {
  const sdk::StepHparams h = sdk::read_hparams(args, 0, 0);
  if (h.step < 1)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "step: hparams->step = " + std::to_string(h.step) + " must be >= 1 (1-based)");
  if ((h.override_mask & (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2)) && !warned_overrides) {
    warned_overrides = true;
    host().log(DSCORE_LOG_WARNING, "sgd",
               "the LR scheduler sets momentum (beta1/beta2), which sgd ignores: as in DeepSpeed, "
               "momentum cycling is disabled for an optimizer without betas");
  }
  const bool has_buffer = momentum != 0;
  sdk::CpuStepTensors tensors(args, slot_count(), "sgd");
  for (size_t i = 0; i < tensors.count(); ++i) {
    tensors.with_dtypes(i, [&](auto g, auto o) {
      sgd_tensor<decltype(g)::value, decltype(o)::value>(
          *this, h, h.step == 1, tensors.numel(i), tensors.param(i), tensors.grad(i)->data,
          has_buffer ? tensors.state(0, i) : nullptr, tensors.param_16bit_data(i));
    });
  }
}

const dscore_plugin_descriptor kSgd = sdk::optimizer_descriptor<Sgd>(
    "sgd", "0.1.0",
    "SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD semantics)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16, kSchema);

}  // namespace
}  // namespace dscore::sgd

DSCORE_PLUGIN_LIBRARY("dscore-sgd", "0.1.0", "dscore", &dscore::sgd::kSgd)
