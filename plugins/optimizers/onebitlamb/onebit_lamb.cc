// The "onebitlamb" optimizer: DeepSpeed's 1-bit LAMB
// (docs/deepspeed-reference.md#onebitlamb). Per parameter TENSOR:
//
// Warm-up (updates k < max(freeze_step, 2); the host all-reduces the
// gradients): LAMB without bias correction, u = m / (sqrt(v) + eps) + wd p,
// trust ratio c = |p| / |u| clamped to [min_coeff, max_coeff] (1 when a norm
// is 0), p -= lr c u. Every c != 1 feeds an average
// lamb_coeff_freeze = coeff_beta lamb_coeff_freeze + (1 - coeff_beta) c.
// The update k = freeze_step - 1 also copies v into v_fresh.
//
// Compressed phase (wants_reduced_gradients answers 0): v is frozen. Each
// tensor's momentum is scaled by scaling_coeff (fixed at the first
// compressed update: the mean over tensors of |m| / sqrt(n), over this
// tensor's), the momenta of all tensors of the step() call are 1-bit
// averaged as ONE buffer (compressed_allreduce.h) and unscaled. From the
// averaged m the gradient is reconstructed, g = (m - beta1 m_prev) /
// (1 - beta1), and feeds v_fresh. The trust ratio is lamb_coeff_freeze times
// a factor max(denominator / fresh denominator) (blended with the share of
// the update that weight decay leaves when wd > 0), clamped to
// [factor_min, factor_max] and to within factor_threshold of the last one.
//
// Counting: DeepSpeed's first step() is an initialisation pass and its
// phase test follows the update, so its k-th real update sees state step
// k + 1; the rules above are its rules rewritten in k. State: slots
// exp_avg, exp_avg_sq, exp_avg_sq_fresh; per tensor (in the extra state)
// lamb_coeff_freeze, last_factor, scaling_coeff, by the tensor's position:
// the host calls step() once per parameter group, in the same order every
// update. The error feedback is not saved, as in DeepSpeed.
#include <dscore/comm.h>
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../onebit_common/compressed_allreduce.h"
#include "../onebit_common/schema.h"

namespace dscore::onebitlamb {
namespace {

using onebit::ErrorFeedback;
using sdk::Error;

const std::string kSchema = onebit::params_schema(R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "freeze_step": {"type": "int", "default": 100000, "min": 1,
                  "doc": "updates 1 .. freeze_step - 1 (at least update 1) are the full-precision warm-up"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999], "auto": "default",
            "doc": "coefficients of the running averages of the gradient and its square, each in [0, 1)"},
  "eps": {"type": "number", "default": 1e-8, "min": 0, "auto": "default",
          "doc": "added to sqrt(exp_avg_sq)"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "weight_decay * param is added to the update before the trust ratio"},
  "max_coeff": {"type": "number", "default": 10.0, "min": 0,
                "doc": "upper bound of the warm-up trust ratio |p| / |update|"},
  "min_coeff": {"type": "number", "default": 0.01, "min": 0,
                "doc": "lower bound of the warm-up trust ratio"},
  "coeff_beta": {"type": "number", "default": 0.9, "min": 0, "max": 1,
                 "doc": "coefficient of the running average of the warm-up trust ratios"},
  "factor_max": {"type": "number", "default": 4.0, "min": 0,
                 "doc": "upper bound of the compressed phase's trust ratio factor"},
  "factor_min": {"type": "number", "default": 0.5, "min": 0,
                 "doc": "lower bound of the compressed phase's trust ratio factor"},
  "factor_threshold": {"type": "number", "default": 0.1, "min": 0,
                       "doc": "largest relative change of the factor from one update to the next"},)json",
                                                  "1-bit LAMB");

constexpr char kStateMagic[8] = {'d', 's', '1', 'b', 'l', 'm', 'b', '1'};

// Per-tensor scalars (DeepSpeed keeps them in the optimizer state).
struct TensorScalars {
  double lamb_coeff_freeze = 0.0;
  double last_factor = 1.0;
  double scaling_coeff = 0.0;  // 0: not fixed yet
};

double norm(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return std::sqrt(sum);
}

class OneBitLamb : public sdk::OptimizerBase {
 public:
  OneBitLamb(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
    const sdk::AdamFamilyParams a = sdk::read_adam_family(
        p, "DeepSpeed's 1-bit LAMB does not support the AMSGrad variant either");
    beta1 = a.beta1, beta2 = a.beta2, eps = a.eps, weight_decay = a.weight_decay;
    sdk::check_non_negative(weight_decay, "weight_decay");
    freeze_step = p.integer("freeze_step");
    if (freeze_step < 1)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "freeze_step = " + std::to_string(freeze_step) + " must be >= 1");
    max_coeff = p.number("max_coeff"), min_coeff = p.number("min_coeff");
    coeff_beta = p.number("coeff_beta");
    factor_max = p.number("factor_max"), factor_min = p.number("factor_min");
    factor_threshold = p.number("factor_threshold");
    if (!(max_coeff >= min_coeff))
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "max_coeff = " + sdk::format_number(max_coeff) +
                      " must be >= min_coeff = " + sdk::format_number(min_coeff));
    if (!(factor_max >= factor_min))
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "factor_max = " + sdk::format_number(factor_max) +
                      " must be >= factor_min = " + sdk::format_number(factor_min));
    world_size = p.args()->world_size;
    declare_slot("exp_avg");
    declare_slot("exp_avg_sq");
    declare_slot("exp_avg_sq_fresh");
  }
  void step(const dscore_optimizer_step_args* args);
  bool compressed(int64_t k) const { return k >= std::max<int64_t>(freeze_step, 2); }
  bool wants_reduced_gradients(int64_t k) const { return !compressed(k); }
  std::string save_extra_state() const;
  void load_extra_state(std::string_view bytes);

 private:
  const dscore_communicator* data_parallel_communicator() const;
  void warmup(const sdk::CpuStepTensors& t, const sdk::StepHparams& h, float wd,
              std::vector<TensorScalars>& s);
  void compressed_step(const sdk::CpuStepTensors& t, const sdk::StepHparams& h, float wd,
                       std::vector<TensorScalars>& s, ErrorFeedback& errors);
  double factor_of(TensorScalars& s, const float* p, const float* m, const float* v,
                   const float* fresh, int64_t n, float wd) const;

  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  double max_coeff = 10, min_coeff = 0.01, coeff_beta = 0.9;
  double factor_max = 4, factor_min = 0.5, factor_threshold = 0.1;
  int64_t freeze_step = 100000;
  int32_t world_size = 1;
  // By step() call within an update (parameter group), then tensor.
  std::vector<std::vector<TensorScalars>> scalars;
  std::map<size_t, ErrorFeedback> errors;  // by step() call within an update
  int64_t current_update = 0;
  size_t call = 0;  // of step() within current_update
};

const dscore_communicator* OneBitLamb::data_parallel_communicator() const {
  const dscore_communicator* comm = host().communicator(DSCORE_GROUP_DATA_PARALLEL);
  if (comm == nullptr && world_size > 1)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "onebitlamb: the compressed phase needs the job's communicator (its data-parallel "
                "group), but the host has none (host->communicator(ctx, "
                "DSCORE_GROUP_DATA_PARALLEL) is NULL) in a job of " +
                    std::to_string(world_size) + " ranks");
  if (comm != nullptr && comm->world_size > 1 &&
      (comm->vtable == nullptr || comm->vtable->allgather == nullptr))
    throw Error(DSCORE_FAILED_PRECONDITION, "onebitlamb: the communicator has no allgather");
  return comm != nullptr && comm->world_size > 1 ? comm : nullptr;
}

// The gradient of tensor i, unscaled, as fp32.
std::vector<float> gradient(const sdk::CpuStepTensors& t, size_t i, double grad_scale) {
  std::vector<float> g(static_cast<size_t>(t.numel(i)));
  const float scale = static_cast<float>(grad_scale);
  sdk::with_float_dtype(t.grad(i)->dtype, [&](auto d) {
    for (size_t j = 0; j < g.size(); ++j)
      g[j] = sdk::load_as_float<decltype(d)::value>(t.grad(i)->data, j) * scale;
  });
  return g;
}

void write_16bit(const sdk::CpuStepTensors& t, size_t i) {
  sdk::with_output_dtype(t.param_16bit_dtype(i), [&](auto o) {
    for (int64_t j = 0; j < t.numel(i); ++j)
      sdk::store_from_float<decltype(o)::value>(t.param_16bit_data(i), j, t.param(i)[j]);
  });
}

void OneBitLamb::warmup(const sdk::CpuStepTensors& t, const sdk::StepHparams& h, float wd,
                        std::vector<TensorScalars>& scalars) {
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2),
              e = static_cast<float>(eps);
  // 1 - beta from the double, rounded once: DeepSpeed's torch ops take it as a Python scalar.
  const float c1 = static_cast<float>(1.0 - h.beta1), c2 = static_cast<float>(1.0 - h.beta2);
  for (size_t i = 0; i < t.count(); ++i) {
    const int64_t n = t.numel(i);
    float *p = t.param(i), *m = t.state(0, i), *v = t.state(1, i), *fresh = t.state(2, i);
    const std::vector<float> g = gradient(t, i, h.grad_scale);
    for (int64_t j = 0; j < n; ++j) {
      m[j] = b1 * m[j] + c1 * g[j];
      v[j] = b2 * v[j] + c2 * g[j] * g[j];
    }
    if (h.step + 1 == freeze_step) std::copy_n(v, n, fresh);
    std::vector<float> update(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      update[j] = m[j] / (std::sqrt(v[j]) + e);
      if (wd > 0) update[j] += wd * p[j];
    }
    const double weight_norm = norm(p, n), update_norm = norm(update.data(), n);
    double coeff = 1.0;
    TensorScalars& s = scalars[i];
    if (weight_norm != 0 && update_norm != 0) {
      coeff = std::clamp(weight_norm / update_norm, min_coeff, max_coeff);
    }
    if (coeff != 1.0)
      s.lamb_coeff_freeze = coeff_beta * s.lamb_coeff_freeze + (1 - coeff_beta) * coeff;
    const float step = static_cast<float>(h.lr * coeff);
    for (int64_t j = 0; j < n; ++j) p[j] -= step * update[j];
    write_16bit(t, i);
  }
}

// The compressed phase's trust-ratio factor of one tensor (updates
// s.last_factor).
double OneBitLamb::factor_of(TensorScalars& s, const float* p, const float* m, const float* v,
                             const float* fresh, int64_t n, float wd) const {
  const float e = static_cast<float>(eps);
  double factor = 0, prelim_sq = 0, update_sq = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float denom = std::sqrt(v[j]) + e;
    const float prelim = m[j] / denom;
    const float update = wd > 0 ? prelim + wd * p[j] : prelim;
    prelim_sq += static_cast<double>(prelim) * prelim;
    update_sq += static_cast<double>(update) * update;
    factor = std::max(factor, static_cast<double>(denom / (std::sqrt(fresh[j]) + e)));
  }
  if (wd > 0) {
    const double ratio = std::min(1.0, std::sqrt(prelim_sq) / std::sqrt(update_sq));
    factor = factor * ratio + (1.0 - ratio);
  }
  factor = std::clamp(factor, factor_min, factor_max);
  factor = std::min(factor, s.last_factor * (1.0 + factor_threshold));
  factor = std::max(factor, s.last_factor * (1.0 - factor_threshold));
  s.last_factor = factor;
  return factor;
}

void OneBitLamb::compressed_step(const sdk::CpuStepTensors& t, const sdk::StepHparams& h, float wd,
                                 std::vector<TensorScalars>& scalars, ErrorFeedback& errors) {
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2),
              e = static_cast<float>(eps);
  // 1 - beta from the double, rounded once: DeepSpeed's torch ops take it as a Python scalar.
  const float c1 = static_cast<float>(1.0 - h.beta1), c2 = static_cast<float>(1.0 - h.beta2);
  const size_t count = t.count();
  std::vector<TensorScalars*> s(count);
  for (size_t i = 0; i < count; ++i) s[i] = &scalars[i];
  if (count > 0 && s[0]->scaling_coeff == 0.0) {  // fixed once, from the warm-up's momenta
    std::vector<double> scales(count);
    double united = 0;
    for (size_t i = 0; i < count; ++i) {
      scales[i] = norm(t.state(0, i), t.numel(i)) / std::sqrt(static_cast<double>(t.numel(i)));
      united += scales[i] / static_cast<double>(count);
    }
    // A tensor whose momentum is all zero keeps its scale (DeepSpeed would divide by 0).
    for (size_t i = 0; i < count; ++i)
      s[i]->scaling_coeff = scales[i] > 0 ? united / scales[i] : 1.0;
  }
  // Local momenta, scaled, in one buffer.
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += t.numel(i);
  std::vector<float> flat(static_cast<size_t>(total)), previous(flat.size());
  for (size_t i = 0, at = 0; i < count; at += t.numel(i), ++i) {
    float* m = t.state(0, i);
    const std::vector<float> g = gradient(t, i, h.grad_scale);
    const float c = static_cast<float>(s[i]->scaling_coeff);
    for (int64_t j = 0; j < t.numel(i); ++j) {
      previous[at + j] = m[j];
      flat[at + j] = (b1 * m[j] + c1 * g[j]) * c;
    }
  }
  if (const dscore_communicator* comm = data_parallel_communicator(); comm != nullptr && total > 0)
    onebit::compressed_allreduce(*comm, flat.data(), total, errors);
  for (size_t i = 0, at = 0; i < count; at += t.numel(i), ++i) {
    const int64_t n = t.numel(i);
    float *p = t.param(i), *m = t.state(0, i), *v = t.state(1, i), *fresh = t.state(2, i);
    const float c = static_cast<float>(s[i]->scaling_coeff);
    for (int64_t j = 0; j < n; ++j) {
      m[j] = flat[at + j] / c;
      const float g = (m[j] - previous[at + j] * b1) / c1;
      fresh[j] = b2 * fresh[j] + c2 * g * g;
    }
    const double factor = factor_of(*s[i], p, m, v, fresh, n, wd);
    const float step = static_cast<float>(h.lr * s[i]->lamb_coeff_freeze * factor);
    for (int64_t j = 0; j < n; ++j) {
      float update = m[j] / (std::sqrt(v[j]) + e);
      if (wd > 0) update += wd * p[j];
      p[j] -= step * update;
    }
    write_16bit(t, i);
  }
}

void OneBitLamb::step(const dscore_optimizer_step_args* args) {
  const sdk::StepHparams h = sdk::read_checked_hparams(args, beta1, beta2, /*one_based=*/true);
  const float wd = static_cast<float>(weight_decay * h.weight_decay_multiplier);
  sdk::CpuStepTensors tensors(args, 3, "onebitlamb");
  call = h.step == current_update ? call + 1 : 0;
  current_update = h.step;
  if (scalars.size() <= call) scalars.resize(call + 1);
  std::vector<TensorScalars>& s = scalars[call];
  if (s.size() != tensors.count()) s.resize(tensors.count());
  if (!compressed(h.step)) return warmup(tensors, h, wd, s);
  if (h.step == std::max<int64_t>(freeze_step, 2))
    host().log(DSCORE_LOG_INFO, "onebitlamb",
               "update " + std::to_string(h.step) +
                   ": starting compressed communication (exp_avg_sq frozen, 1-bit momentum)");
  compressed_step(tensors, h, wd, s, errors[call]);
}

template <typename T>
void put(std::string& bytes, const T& value) {
  bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Extra state: a marker, freeze_step, and the tensors' scalars per step()
// call. The error feedback is not saved (DeepSpeed drops it on load too).
std::string OneBitLamb::save_extra_state() const {
  std::string bytes(kStateMagic, sizeof kStateMagic);
  put(bytes, freeze_step);
  put(bytes, static_cast<uint64_t>(scalars.size()));
  for (const std::vector<TensorScalars>& group : scalars) {
    put(bytes, static_cast<uint64_t>(group.size()));
    for (const TensorScalars& s : group) {
      put(bytes, s.lamb_coeff_freeze);
      put(bytes, s.last_factor);
      put(bytes, s.scaling_coeff);
    }
  }
  return bytes;
}

void OneBitLamb::load_extra_state(std::string_view bytes) {
  size_t at = 0;
  auto check_left = [&](uint64_t size) {
    if (bytes.size() - at < size)
      throw Error(DSCORE_DATA_LOSS,
                  "onebitlamb: the checkpoint's optimizer extra state is truncated (" +
                      std::to_string(bytes.size()) + " bytes)");
  };
  auto take = [&](void* out, size_t size) {
    check_left(size);
    std::memcpy(out, bytes.data() + at, size);
    at += size;
  };
  char magic[sizeof kStateMagic];
  take(magic, sizeof magic);
  if (std::memcmp(magic, kStateMagic, sizeof magic) != 0)
    throw Error(DSCORE_DATA_LOSS,
                "onebitlamb: the checkpoint's optimizer extra state is not 1-bit LAMB's (" +
                    std::to_string(bytes.size()) + " bytes)");
  int64_t saved_freeze = 0;
  uint64_t count = 0;
  take(&saved_freeze, sizeof saved_freeze);
  take(&count, sizeof count);
  std::vector<std::vector<TensorScalars>> loaded;
  for (uint64_t c = 0; c < count; ++c) {
    uint64_t tensors = 0;
    take(&tensors, sizeof tensors);
    check_left(tensors > bytes.size() ? bytes.size() + 1 : tensors * 3 * sizeof(double));
    std::vector<TensorScalars>& group = loaded.emplace_back(tensors);
    for (TensorScalars& s : group) {
      take(&s.lamb_coeff_freeze, sizeof(double));
      take(&s.last_factor, sizeof(double));
      take(&s.scaling_coeff, sizeof(double));
    }
  }
  if (at != bytes.size())
    throw Error(DSCORE_DATA_LOSS, "onebitlamb: the checkpoint's optimizer extra state has " +
                                      std::to_string(bytes.size() - at) + " bytes too many");
  if (saved_freeze != freeze_step)
    host().log(DSCORE_LOG_WARNING, "onebitlamb",
               "the checkpoint was saved with freeze_step " + std::to_string(saved_freeze) +
                   "; continuing with the configured " + std::to_string(freeze_step));
  scalars = std::move(loaded);
  errors.clear();
  current_update = 0;
}

const dscore_plugin_descriptor kOneBitLamb = sdk::optimizer_descriptor<OneBitLamb>(
    "onebitlamb", "0.1.0",
    "1-bit LAMB: LAMB warm-up, then frozen variance, 1-bit compressed momentum and a "
    "reconstructed trust ratio (DeepSpeed)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16 | DSCORE_CAP_MULTI_RANK |
        DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS,
    kSchema.c_str());

}  // namespace
}  // namespace dscore::onebitlamb

DSCORE_PLUGIN_LIBRARY("dscore-onebitlamb", "0.1.0", "dscore", &dscore::onebitlamb::kOneBitLamb)
