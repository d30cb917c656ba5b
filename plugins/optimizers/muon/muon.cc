// The "muon" optimizer: DeepSpeed 0.19's Muon (MuonWithAuxAdam). Weight
// matrices (parameters of two or more dimensions whose name holds neither
// "embed" nor "lm_head", DeepSpeed's rule) take Muon: momentum, Nesterov,
// then the momentum orthogonalized by Newton-Schulz (newton_schulz.h) and
// scaled by sqrt(rows / cols) where rows > cols, applied with decoupled
// weight decay. That needs whole matrices, so it runs in precondition()
// (optimizer.h, ABI 1.2): the host gathers each matrix's gradient and
// momentum across ZeRO ranks and keeps its part of the result. Everything
// else takes Adam (FusedAdam's arithmetic, adam_common/adam_update.h).
//
// State: slot "exp_avg" is a matrix's momentum buffer or Adam's first
// moment; "exp_avg_sq" Adam's second moment (unused, zero, for matrices).
//
// Learning rates: the Muon half's is muon_lr, else lr, else 0.02; the Adam
// half's adam_lr, else lr, else 3e-4 (DeepSpeed's). An LR scheduler starts
// from "lr", else "muon_lr" (the host's base, optimizer_base_lr), and each
// half keeps its ratio to it.
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "../adam_common/adam_update.h"
#include "matmul.h"
#include "newton_schulz.h"

namespace dscore::muon {
namespace {

using sdk::Error;

constexpr const char kSchema[] = R"json({
  "lr": {"type": "number", "min": 0,
         "doc": "learning rate of both halves unless muon_lr / adam_lr set theirs; an LR scheduler starts from it"},
  "muon_lr": {"type": "number", "min": 0, "doc": "learning rate of the weight matrices (Muon); default lr, else 0.02"},
  "adam_lr": {"type": "number", "min": 0, "doc": "learning rate of the other parameters (Adam); default lr, else 3e-4"},
  "momentum": {"type": "number", "default": 0.95, "min": 0, "max": 1,
               "doc": "Muon's momentum (Nesterov)"},
  "ns_method": {"type": "string", "default": "gram", "enum": ["gram", "standard"],
                "doc": "Newton-Schulz variant: gram (fp16, on X X^T) or standard (bf16)"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.95], "doc": "the Adam half's (beta1, beta2)"},
  "eps": {"type": "number", "default": 1e-10, "min": 0, "doc": "the Adam half's epsilon"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "decoupled weight decay of both halves"},
  "adam_w_mode": {"type": "bool", "default": true,
                  "doc": "the Adam half decays decoupled (AdamW); false adds weight_decay * param to its gradient"},
  "per_head_muon": {"type": "bool", "default": false,
                    "doc": "orthogonalize each attention head apart; not implemented by dscore: refused when true"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";

bool has_keyword(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name.find("embed") != std::string::npos || name.find("lm_head") != std::string::npos;
}

class Muon : public sdk::OptimizerBase {
 public:
  Muon(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
    has_lr_ = p.has("lr");
    has_muon_lr_ = p.has("muon_lr");
    lr_ = p.number("lr", 0.0);
    muon_lr_ = p.number("muon_lr", has_lr_ ? lr_ : 0.02);
    adam_lr_ = p.number("adam_lr", has_lr_ ? lr_ : 3e-4);
    momentum_ = p.number("momentum");
    method_ = p.string("ns_method") == "standard" ? NsMethod::kStandard : NsMethod::kGram;
    const std::vector<double> betas = p.numbers("betas");
    sdk::check_betas(betas);
    beta1_ = betas[0];
    beta2_ = betas[1];
    eps_ = p.number("eps");
    weight_decay_ = p.number("weight_decay");
    adamw_ = p.boolean("adam_w_mode");
    if (p.boolean("per_head_muon"))
      throw Error(DSCORE_UNIMPLEMENTED,
                  "per_head_muon (orthogonalizing each attention head apart) is not implemented by "
                  "dscore: remove it or set it to false");
    declare_slot("exp_avg");
    declare_slot("exp_avg_sq");
  }

  bool preconditions(const dscore_model_param& param) const {
    return param.ndim >= 2 && param.name != nullptr && !has_keyword(param.name);
  }
  void precondition(const dscore_optimizer_precondition_args* args);
  void step(const dscore_optimizer_step_args* args);

 private:
  // The lr of a half whose own base is `base`, at the scheduled value: the
  // host schedules from "lr", else from "muon_lr" (the Muon half's lr,
  // what DeepSpeed reports), and each half keeps its ratio to that.
  double half_lr(double base, double scheduled) const {
    const double reference = has_lr_ ? lr_ : (has_muon_lr_ ? muon_lr_ : 0.0);
    if (scheduled == reference) return base;
    return reference > 0 ? base * (scheduled / reference) : scheduled;
  }

  bool logged_route_ = false;
  bool has_lr_ = false, has_muon_lr_ = false;
  double lr_ = 0, muon_lr_ = 0.02, adam_lr_ = 3e-4, momentum_ = 0.95;
  NsMethod method_ = NsMethod::kGram;
  double beta1_ = 0.9, beta2_ = 0.95, eps_ = 1e-10, weight_decay_ = 0;
  bool adamw_ = true;
};

// muon_update(grad, momentum, beta, nesterov=True): the momentum follows the
// gradient, the update is the gradient pulled toward it, orthogonalized
// and scaled. torch's lerp in fp32, as its CPU kernel computes it.
void Muon::precondition(const dscore_optimizer_precondition_args* args) {
  if (args == nullptr || args->grad == nullptr || args->state == nullptr || args->param == nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, "precondition: grad, state and param must be set");
  const dscore_tensor& g = *args->grad;
  const dscore_tensor& m = *args->state;
  if (g.dtype != DSCORE_DTYPE_F32 || m.dtype != DSCORE_DTYPE_F32 || g.numel != m.numel ||
      g.ndim < 2)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "precondition: expected F32 gradient and state of one matrix's size");
  if (!logged_route_) {
    logged_route_ = true;
    host().log(DSCORE_LOG_INFO, "muon", "Newton-Schulz products on " + matmul_route());
  }
  float* grad = static_cast<float*>(g.data);
  float* buf = static_cast<float*>(m.data);
  const float into = static_cast<float>(1.0 - momentum_);  // lerp(m, g, 1 - beta)
  const float beta = static_cast<float>(momentum_);
  const float toward = 1.0f - beta;  // lerp(g, m, beta): beta >= 0.5 takes the far form
  for (int64_t i = 0; i < g.numel; ++i) {
    const float mi = buf[i] + into * (grad[i] - buf[i]);
    buf[i] = mi;
    grad[i] = beta >= 0.5f ? mi - (mi - grad[i]) * toward : grad[i] + beta * (mi - grad[i]);
  }
  const int64_t rows = g.shape[0], cols = g.numel / rows;
  orthogonalize(method_, rows, cols, grad);
  // DeepSpeed's `update *= scale`: the in-place multiply takes the scale in
  // the method's dtype; compiled, it and the cast back to the gradient's
  // dtype fold into one fp32 product.
  if (rows > cols) {
    const float exact = static_cast<float>(std::sqrt(static_cast<double>(rows) / cols));
    const float scale = round_to_method(method_, exact);
    for (int64_t i = 0; i < g.numel; ++i) grad[i] *= scale;
  }
}

template <dscore_dtype G, dscore_dtype P16>
void muon_apply(float lr, float decay, float grad_scale, int64_t n, float* param, const void* grad,
                void* out16) {
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i] * decay;
    p += -lr * (sdk::load_as_float<G>(grad, i) * grad_scale);
    param[i] = p;
    sdk::store_from_float<P16>(out16, i, p);
  }
}

void Muon::step(const dscore_optimizer_step_args* args) {
  const sdk::StepHparams h = sdk::read_checked_hparams(args, beta1_, beta2_, /*one_based=*/true);
  sdk::CpuStepTensors tensors(args, slot_count(), "muon");
  const double wd = weight_decay_ * h.weight_decay_multiplier;
  if ((h.group_flags & DSCORE_OPTIMIZER_GROUP_PRECONDITIONED) != 0) {
    const double lr = half_lr(muon_lr_, h.lr);
    const float decay = static_cast<float>(1.0 - lr * wd);
    for (size_t i = 0; i < tensors.count(); ++i)
      tensors.with_dtypes(i, [&](auto g, auto o) {
        muon_apply<decltype(g)::value, decltype(o)::value>(
            static_cast<float>(lr), decay, static_cast<float>(h.grad_scale), tensors.numel(i),
            tensors.param(i), tensors.grad(i)->data, tensors.param_16bit_data(i));
      });
    return;
  }
  adam::AdamConstants k{};
  k.lr = static_cast<float>(half_lr(adam_lr_, h.lr));
  k.beta1 = static_cast<float>(h.beta1);
  k.beta2 = static_cast<float>(h.beta2);
  k.eps = static_cast<float>(eps_);
  k.weight_decay = static_cast<float>(wd);
  k.bias_correction1 = sdk::fp32_bias_correction(k.beta1, h.step);
  k.bias_correction2 = sdk::fp32_bias_correction(k.beta2, h.step);
  k.grad_scale = static_cast<float>(h.grad_scale);
  k.adamw = adamw_;
  for (size_t i = 0; i < tensors.count(); ++i)
    tensors.with_dtypes(i, [&](auto g, auto o) {
      adam::adam_update<decltype(g)::value, decltype(o)::value>(
          k, 0, tensors.numel(i), tensors.param(i), tensors.grad(i)->data, tensors.state(0, i),
          tensors.state(1, i), tensors.param_16bit_data(i));
    });
}

const dscore_plugin_descriptor kMuon = sdk::optimizer_descriptor<Muon>(
    "muon", "0.1.0",
    "Muon (DeepSpeed 0.19): Newton-Schulz-orthogonalized momentum for weight matrices, Adam for "
    "the rest",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16, kSchema);

}  // namespace
}  // namespace dscore::muon

DSCORE_PLUGIN_LIBRARY("dscore-muon", "0.1.0", "dscore", &dscore::muon::kMuon)
