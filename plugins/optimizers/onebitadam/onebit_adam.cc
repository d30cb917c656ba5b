// The "onebitadam" optimizer: DeepSpeed's 1-bit Adam (docs/deepspeed-reference.md#onebitadam).
// Updates 1 .. freeze_step - 1 are the warm-up: the host all-reduces the
// gradients as usual and the update is Adam WITHOUT bias correction,
// p -= lr (m / (sqrt(v) + eps) + wd p). From update freeze_step on,
// wants_reduced_gradients() answers 0, so step() receives this rank's local
// gradients: v is frozen, m takes the local gradient and is then replaced by
// the 1-bit compressed average of all ranks' m (compressed_allreduce.h, worker
// and server error feedback) before the same update rule.
//
// Counting: DeepSpeed's FP16 wrapper spends the first step() on an
// initialisation pass with zero gradients, so its k-th real update sees
// state step k + 1 and compression starts at real update freeze_step; dscore
// has no such pass and uses the update number (hparams->step) directly, which
// gives the same schedule (docs/deepspeed-differences.md).
//
// State: exp_avg and exp_avg_sq are host-owned slots. The error-feedback
// buffers live here, keyed by the parameter's address; like DeepSpeed they
// are not checkpointed (load_extra_state drops them) — the phase follows
// from hparams->step, which the host checkpoints.
#include <dscore/comm.h>
#include <dscore/optimizer.h>
#include <dscore/cpp/optimizer.hpp>
#include <dscore/cpp/optimizer_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../onebit_common/compressed_allreduce.h"
#include "../onebit_common/schema.h"

namespace dscore::onebitadam {

using onebit::compressed_allreduce;
using onebit::ErrorFeedback;
namespace {

using sdk::Error;

const std::string kSchema = onebit::params_schema(R"json({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "default",
         "doc": "base learning rate; an LR scheduler overrides it per step"},
  "freeze_step": {"type": "int", "default": 100000, "min": 1,
                  "doc": "updates before compression: 1 .. freeze_step - 1 are full-precision warm-up"},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999], "auto": "default",
            "doc": "coefficients of the running averages of the gradient and its square, each in [0, 1)"},
  "eps": {"type": "number", "default": 1e-8, "min": 0, "auto": "default",
          "doc": "added to sqrt(exp_avg_sq)"},
  "weight_decay": {"type": "number", "default": 0, "min": 0, "auto": "default",
                   "doc": "weight_decay * param is added to the update (when > 0)"},)json",
                                                  "1-bit Adam");

constexpr char kStateMagic[8] = {'d', 's', '1', 'b', 'a', 'd', 'm', '1'};

class OneBitAdam : public sdk::OptimizerBase {
 public:
  OneBitAdam(sdk::HostRef host, const sdk::Params& p) : OptimizerBase(host) {
    const sdk::AdamFamilyParams a = sdk::read_adam_family(
        p, "DeepSpeed's 1-bit Adam does not support the AMSGrad variant either");
    beta1 = a.beta1;
    beta2 = a.beta2;
    eps = a.eps;
    weight_decay = a.weight_decay;
    freeze_step = p.integer("freeze_step");
    world_size = p.args()->world_size;
    sdk::check_non_negative(weight_decay, "weight_decay");
    if (freeze_step < 1)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "freeze_step = " + std::to_string(freeze_step) + " must be >= 1");
    declare_slot("exp_avg");
    declare_slot("exp_avg_sq");
  }
  void step(const dscore_optimizer_step_args* args);
  bool wants_reduced_gradients(int64_t step) const { return step < freeze_step; }
  std::string save_extra_state() const;
  void load_extra_state(std::string_view bytes);

 private:
  const dscore_communicator* data_parallel_communicator() const;

  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t freeze_step = 100000;
  int32_t world_size = 1;
  bool announced = false;
  std::map<const void*, ErrorFeedback> errors;  // by parameter address
};

// one_minus_beta1/2: 1 - beta in double, rounded once, as DeepSpeed's
// OnebitAdam passes `1 - beta1` from Python to torch's fp32 kernels.
struct Constants {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
};

// m (and v during warm-up) from the gradient, in place.
template <dscore_dtype G>
void update_moments(const Constants& k, bool warmup, int64_t n, const void* grad, float* m,
                    float* v) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = sdk::load_as_float<G>(grad, i) * k.grad_scale;
    m[i] = k.beta1 * m[i] + k.one_minus_beta1 * g;
    if (warmup) v[i] = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
  }
}

template <dscore_dtype P16>
void apply_update(const Constants& k, int64_t n, float* param, const float* m, const float* v,
                  void* out16) {
  for (int64_t i = 0; i < n; ++i) {
    float update = m[i] / (std::sqrt(v[i]) + k.eps);
    if (k.weight_decay > 0) update += k.weight_decay * param[i];
    param[i] -= k.lr * update;
    sdk::store_from_float<P16>(out16, i, param[i]);
  }
}

const dscore_communicator* OneBitAdam::data_parallel_communicator() const {
  const dscore_communicator* comm = host().communicator(DSCORE_GROUP_DATA_PARALLEL);
  if (comm == nullptr && world_size > 1)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "onebitadam: the compressed phase needs the job's communicator (its data-parallel "
                "group), but the host has none (host->communicator(ctx, "
                "DSCORE_GROUP_DATA_PARALLEL) is NULL) in a job of " +
                    std::to_string(world_size) + " ranks");
  if (comm != nullptr && comm->world_size > 1 &&
      (comm->vtable == nullptr || comm->vtable->allgather == nullptr))
    throw Error(DSCORE_FAILED_PRECONDITION, "onebitadam: the communicator has no allgather");
  return comm != nullptr && comm->world_size > 1 ? comm : nullptr;
}

void OneBitAdam::step(const dscore_optimizer_step_args* args) {
  const sdk::StepHparams h = sdk::read_checked_hparams(args, beta1, beta2, /*one_based=*/true);
  const bool warmup = h.step < freeze_step;
  const Constants k{static_cast<float>(h.lr),
                    static_cast<float>(h.beta1),
                    static_cast<float>(h.beta2),
                    static_cast<float>(1.0 - h.beta1),
                    static_cast<float>(1.0 - h.beta2),
                    static_cast<float>(eps),
                    static_cast<float>(weight_decay * h.weight_decay_multiplier),
                    static_cast<float>(h.grad_scale)};
  sdk::CpuStepTensors tensors(args, 2, "onebitadam");
  const dscore_communicator* comm = warmup ? nullptr : data_parallel_communicator();
  if (!warmup && !announced) {
    announced = true;
    host().log(DSCORE_LOG_INFO, "onebitadam",
               "update " + std::to_string(h.step) +
                   ": starting compressed communication (exp_avg_sq frozen, 1-bit momentum)");
  }
  for (size_t i = 0; i < tensors.count(); ++i) {
    float* m = tensors.state(0, i);
    float* v = tensors.state(1, i);
    sdk::with_float_dtype(tensors.grad(i)->dtype, [&](auto g) {
      update_moments<decltype(g)::value>(k, warmup, tensors.numel(i), tensors.grad(i)->data, m, v);
    });
    if (comm != nullptr) compressed_allreduce(*comm, m, tensors.numel(i), errors[tensors.param(i)]);
    sdk::with_output_dtype(tensors.param_16bit_dtype(i), [&](auto o) {
      apply_update<decltype(o)::value>(k, tensors.numel(i), tensors.param(i), m, v,
                                       tensors.param_16bit_data(i));
    });
  }
}

// Extra state: a marker and freeze_step, so a checkpoint of another
// optimizer or configuration is noticed. Error feedback is not saved.
std::string OneBitAdam::save_extra_state() const {
  std::string bytes(kStateMagic, sizeof kStateMagic);
  bytes.append(reinterpret_cast<const char*>(&freeze_step), sizeof(int64_t));
  return bytes;
}

void OneBitAdam::load_extra_state(std::string_view bytes) {
  if (bytes.size() != sizeof kStateMagic + sizeof(int64_t) ||
      std::memcmp(bytes.data(), kStateMagic, sizeof kStateMagic) != 0)
    throw Error(DSCORE_DATA_LOSS,
                "onebitadam: the checkpoint's optimizer extra state is not 1-bit Adam's (" +
                    std::to_string(bytes.size()) + " bytes)");
  int64_t saved_freeze_step = 0;
  std::memcpy(&saved_freeze_step, bytes.data() + sizeof kStateMagic, sizeof saved_freeze_step);
  if (saved_freeze_step != freeze_step)
    host().log(DSCORE_LOG_WARNING, "onebitadam",
               "the checkpoint was saved with freeze_step " + std::to_string(saved_freeze_step) +
                   "; continuing with the configured " + std::to_string(freeze_step));
  errors.clear();  // DeepSpeed resets the error feedback on load too
}

const dscore_plugin_descriptor kOneBitAdam = sdk::optimizer_descriptor<OneBitAdam>(
    "onebitadam", "0.1.0",
    "1-bit Adam: Adam warm-up, then frozen variance and 1-bit compressed momentum (DeepSpeed)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16 | DSCORE_CAP_MULTI_RANK,
    kSchema.c_str());

}  // namespace
}  // namespace dscore::onebitadam

DSCORE_PLUGIN_LIBRARY("dscore-onebitadam", "0.1.0", "dscore", &dscore::onebitadam::kOneBitAdam)
