// The "zerooneadam" optimizer: DeepSpeed's 0/1 Adam
// (docs/deepspeed-reference.md#zerooneadam). Adam without bias correction,
// p -= lr (m / (sqrt(v) + eps) + wd p), with two communication savers:
//
// Variance phase (updates k <= var_freeze_step). The variance v is updated
// only on updates whose DeepSpeed step number k + 1 is a multiple of
// var_interval; on those the host all-reduces the gradients as usual
// (wants_reduced_gradients). On the others the gradient stays local and m
// takes its 1-bit compressed average (compressed_allreduce.h) instead.
// var_interval starts at 1 and doubles every var_update_scaler updates of v.
//
// Local-step phase (k > var_freeze_step). v is frozen, nothing is reduced by
// the host; m takes the local gradient and each rank steps on its own,
// accumulating its steps in u (the momentum_accumulator slot) and its
// learning rates in lrs. Every local_step_interval updates (a multiple of
// k + 1 again) the ranks synchronise: the local steps are undone, u is
// rescaled by sqrt(v) + eps, 1-bit averaged, turned back into m = -u / lrs
// and applied. local_step_interval starts at 1 and doubles (up to
// local_step_clipper) every local_step_scaler updates.
//
// Counting: DeepSpeed spends its first step() on an initialisation pass, so
// its state step of update k is k + 1; the schedule here uses k + 1 wherever
// DeepSpeed tests its state step, which gives the same schedule. Both
// intervals are functions of k alone (Schedule), so a checkpoint needs only
// lrs (extra state) besides the slots; the error feedback is dropped on load
// as DeepSpeed does. docs/deepspeed-differences.md lists the differences.
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

namespace dscore::zerooneadam {
namespace {

using onebit::ErrorFeedback;
using sdk::Error;

const std::string kSchema = onebit::params_schema(R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999], "auto": "default",
            "doc": "coefficients of the running averages of the gradient and its square, each in [0, 1)"},
  "eps": {"type": "number", "default": 1e-8, "min": 0, "auto": "default",
          "doc": "added to sqrt(exp_avg_sq)"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "weight_decay * param is added to the update (when > 0)"},
  "var_freeze_step": {"type": "int", "default": 100000, "min": 0,
                      "doc": "the last update that may update the variance; later updates take local steps"},
  "var_update_scaler": {"type": "int", "default": 16, "min": 1,
                        "doc": "variance updates between doublings of the variance update interval"},
  "local_step_scaler": {"type": "int", "default": 32678, "min": 1,
                        "doc": "updates between doublings of the local step interval"},
  "local_step_clipper": {"type": "int", "default": 16, "min": 1,
                         "doc": "largest local step interval (updates between synchronisations)"},)json",
                                                  "0/1 Adam");

constexpr char kStateMagic[8] = {'d', 's', '0', '1', 'a', 'd', 'm', '1'};

// The two interval policies before update k (1-based), advanced update by
// update from the last point asked for (restarted when asked for an earlier
// one, as after a checkpoint load): O(1) per update in training.
class Schedule {
 public:
  struct Point {
    int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
  };
  Schedule(int64_t var_freeze_step, int64_t var_update_scaler, int64_t local_step_scaler,
           int64_t local_step_clipper)
      : freeze_(var_freeze_step),
        var_scaler_(var_update_scaler),
        local_scaler_(local_step_scaler),
        clipper_(local_step_clipper) {}
  bool frozen(int64_t k) const { return k > freeze_; }
  const Point& before(int64_t k) {
    if (k < next_) next_ = 1, point_ = Point{};
    for (; next_ < k; ++next_) advance(next_);
    return point_;
  }
  // Whether update k updates the variance (phase 1) or synchronises (phase 2).
  bool full_update(int64_t k) {
    const Point& at = before(k);
    return (k + 1) % (frozen(k) ? at.local_interval : at.var_interval) == 0;
  }

 private:
  void advance(int64_t k) {  // what update k does to the counters
    if (!frozen(k)) {
      if ((k + 1) % point_.var_interval != 0) return;
      if (++point_.var_counter == var_scaler_) point_.var_counter = 0, point_.var_interval *= 2;
    } else if (++point_.local_counter == local_scaler_) {
      point_.local_counter = 0;
      point_.local_interval = std::min(clipper_, point_.local_interval * 2);
    }
  }
  int64_t freeze_, var_scaler_, local_scaler_, clipper_;
  int64_t next_ = 1;  // point_ holds the counters before update next_
  Point point_;
};

class ZeroOneAdam : public sdk::OptimizerBase {
 public:
  ZeroOneAdam(sdk::HostRef host, const sdk::Params& p)
      : OptimizerBase(host),
        schedule(p.integer("var_freeze_step"), p.integer("var_update_scaler"),
                 p.integer("local_step_scaler"), p.integer("local_step_clipper")) {
    const sdk::AdamFamilyParams a = sdk::read_adam_family(
        p, "DeepSpeed's 0/1 Adam does not support the AMSGrad variant either");
    beta1 = a.beta1, beta2 = a.beta2, eps = a.eps, weight_decay = a.weight_decay;
    sdk::check_non_negative(weight_decay, "weight_decay");
    var_freeze_step = p.integer("var_freeze_step");
    world_size = p.args()->world_size;
    for (const char* key : {"var_update_scaler", "local_step_scaler", "local_step_clipper"})
      if (p.integer(key) < 1)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    std::string(key) + " = " + std::to_string(p.integer(key)) + " must be >= 1");
    declare_slot("exp_avg");
    declare_slot("exp_avg_sq");
    declare_slot("momentum_accumulator");
  }
  void step(const dscore_optimizer_step_args* args);
  bool wants_reduced_gradients(int64_t k) const {
    return !schedule.frozen(k) && schedule.full_update(k);
  }
  std::string save_extra_state() const;
  void load_extra_state(std::string_view bytes);

 private:
  const dscore_communicator* data_parallel_communicator() const;
  void begin_update(int64_t k, double lr);

  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t var_freeze_step = 100000;
  int32_t world_size = 1;
  mutable Schedule schedule;  // a cache of a function of k
  // The sum of the learning rates of the local steps since the last
  // synchronisation, this update's included; `lrs_update` is that update.
  double lrs = 0;
  int64_t lrs_update = 0;
  bool lrs_update_synced = false;  // whether update lrs_update synchronised
  bool errors_reset_for_local_steps = false;
  std::map<const void*, ErrorFeedback> errors;  // by parameter address
};

const dscore_communicator* ZeroOneAdam::data_parallel_communicator() const {
  const dscore_communicator* comm = host().communicator(DSCORE_GROUP_DATA_PARALLEL);
  if (comm == nullptr && world_size > 1)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "zerooneadam: 1-bit communication needs the job's communicator (its data-parallel "
                "group), but the host has none (host->communicator(ctx, "
                "DSCORE_GROUP_DATA_PARALLEL) is NULL) in a job of " +
                    std::to_string(world_size) + " ranks");
  if (comm != nullptr && comm->world_size > 1 &&
      (comm->vtable == nullptr || comm->vtable->allgather == nullptr))
    throw Error(DSCORE_FAILED_PRECONDITION, "zerooneadam: the communicator has no allgather");
  return comm != nullptr && comm->world_size > 1 ? comm : nullptr;
}

// Once per update number (step() runs once per parameter group): lrs
// restarts after a synchronisation and sums the local steps' rates; the
// error feedback restarts once when the local steps begin (DeepSpeed: it
// then compresses accumulated momentum instead of gradients).
void ZeroOneAdam::begin_update(int64_t k, double lr) {
  if (k == lrs_update) return;
  if (lrs_update_synced) lrs = 0;
  if (schedule.frozen(k)) lrs += lr;
  lrs_update = k;
  lrs_update_synced = schedule.frozen(k) && schedule.full_update(k);
  if (schedule.frozen(k) && !errors_reset_for_local_steps) {
    errors.clear();
    errors_reset_for_local_steps = true;
    host().log(DSCORE_LOG_INFO, "zerooneadam",
               "update " + std::to_string(k) + ": variance frozen, local steps begin");
  }
}

void ZeroOneAdam::step(const dscore_optimizer_step_args* args) {
  const sdk::StepHparams h = sdk::read_checked_hparams(args, beta1, beta2, /*one_based=*/true);
  const int64_t k = h.step;
  begin_update(k, h.lr);
  const bool local_steps = schedule.frozen(k);
  const bool full = schedule.full_update(k);
  const float lr = static_cast<float>(h.lr), b1 = static_cast<float>(h.beta1),
              b2 = static_cast<float>(h.beta2), e = static_cast<float>(eps),
              wd = static_cast<float>(weight_decay * h.weight_decay_multiplier),
              scale = static_cast<float>(h.grad_scale);
  // 1 - beta from the double, rounded once: DeepSpeed's torch ops take it as a Python scalar.
  const float c1 = static_cast<float>(1.0 - h.beta1), c2 = static_cast<float>(1.0 - h.beta2);
  const bool needs_comm = (!local_steps && !full) || (local_steps && full);
  const dscore_communicator* comm = needs_comm ? data_parallel_communicator() : nullptr;
  sdk::CpuStepTensors tensors(args, 3, "zerooneadam");
  std::vector<float> g;
  for (size_t t = 0; t < tensors.count(); ++t) {
    const int64_t n = tensors.numel(t);
    float* p = tensors.param(t);
    float *m = tensors.state(0, t), *v = tensors.state(1, t), *u = tensors.state(2, t);
    g.resize(static_cast<size_t>(n));
    sdk::with_float_dtype(tensors.grad(t)->dtype, [&](auto d) {
      for (int64_t i = 0; i < n; ++i)
        g[i] = sdk::load_as_float<decltype(d)::value>(tensors.grad(t)->data, i) * scale;
    });
    // The momentum (and, on variance updates, the variance).
    if (!local_steps && full) {
      for (int64_t i = 0; i < n; ++i) v[i] = b2 * v[i] + c2 * g[i] * g[i];
    } else if (comm != nullptr && !local_steps) {  // 1-bit average of the gradients
      onebit::compressed_allreduce(*comm, g.data(), n, errors[p]);
    }
    for (int64_t i = 0; i < n; ++i) m[i] = b1 * m[i] + c1 * g[i];
    // The step.
    for (int64_t i = 0; i < n; ++i) {
      float update = m[i] / (std::sqrt(v[i]) + e);
      if (wd > 0) update += wd * p[i];
      p[i] -= lr * update;
      if (local_steps) u[i] += -lr * update;
    }
    if (local_steps && full) {  // synchronise the local steps
      for (int64_t i = 0; i < n; ++i) {
        p[i] -= u[i];
        u[i] *= std::sqrt(v[i]) + e;
      }
      if (comm != nullptr) onebit::compressed_allreduce(*comm, u, n, errors[p]);
      // Local steps all at lr 0 (a warm-up from 0) moved nothing: m stays
      // (DeepSpeed's -u / lrs would be 0 / 0).
      const float rates = static_cast<float>(lrs);
      for (int64_t i = 0; i < n; ++i) {
        if (rates != 0.0f) m[i] = -(u[i] / rates);
        p[i] += u[i] / (std::sqrt(v[i]) + e);
        u[i] = 0.0f;
      }
    }
    sdk::with_output_dtype(tensors.param_16bit_dtype(t), [&](auto o) {
      for (int64_t i = 0; i < n; ++i)
        sdk::store_from_float<decltype(o)::value>(tensors.param_16bit_data(t), i, p[i]);
    });
  }
}

// Extra state: a marker, var_freeze_step, lrs and its update. The error
// feedback is not saved (DeepSpeed drops it on load too).
std::string ZeroOneAdam::save_extra_state() const {
  std::string bytes(kStateMagic, sizeof kStateMagic);
  bytes.append(reinterpret_cast<const char*>(&var_freeze_step), sizeof(int64_t));
  bytes.append(reinterpret_cast<const char*>(&lrs), sizeof(double));
  bytes.append(reinterpret_cast<const char*>(&lrs_update), sizeof(int64_t));
  return bytes;
}

void ZeroOneAdam::load_extra_state(std::string_view bytes) {
  constexpr size_t kSize = sizeof kStateMagic + 2 * sizeof(int64_t) + sizeof(double);
  if (bytes.size() != kSize || std::memcmp(bytes.data(), kStateMagic, sizeof kStateMagic) != 0)
    throw Error(DSCORE_DATA_LOSS,
                "zerooneadam: the checkpoint's optimizer extra state is not 0/1 Adam's (" +
                    std::to_string(bytes.size()) + " bytes, expected " + std::to_string(kSize) +
                    ")");
  const char* at = bytes.data() + sizeof kStateMagic;
  int64_t saved_freeze = 0;
  std::memcpy(&saved_freeze, at, sizeof saved_freeze);
  std::memcpy(&lrs, at + sizeof(int64_t), sizeof lrs);
  std::memcpy(&lrs_update, at + sizeof(int64_t) + sizeof(double), sizeof lrs_update);
  if (saved_freeze != var_freeze_step)
    host().log(DSCORE_LOG_WARNING, "zerooneadam",
               "the checkpoint was saved with var_freeze_step " + std::to_string(saved_freeze) +
                   "; continuing with the configured " + std::to_string(var_freeze_step));
  errors.clear();
  errors_reset_for_local_steps = lrs_update > 0 && schedule.frozen(lrs_update);
  lrs_update_synced = errors_reset_for_local_steps && schedule.full_update(lrs_update);
}

const dscore_plugin_descriptor kZeroOneAdam = sdk::optimizer_descriptor<ZeroOneAdam>(
    "zerooneadam", "0.1.0",
    "0/1 Adam: variance updated at doubling intervals, then local steps synchronised through "
    "1-bit compressed communication (DeepSpeed)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16 | DSCORE_CAP_MULTI_RANK,
    kSchema.c_str());

}  // namespace
}  // namespace dscore::zerooneadam

DSCORE_PLUGIN_LIBRARY("dscore-zerooneadam", "0.1.0", "dscore", &dscore::zerooneadam::kZeroOneAdam)
