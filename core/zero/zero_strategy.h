// What a ZeRO stage implementation gives the engine. The engine owns the
// model, the optimizer and the schedule; a strategy owns where parameters
// and gradients live and how they move: FlatZero (stages 0, 1, 2: one flat
// buffer, partitioned for 1/2) and ShardedZero (stage 3: every parameter
// partitioned, gathered on acquire).
//
// "Owned space" is the part of the model this rank updates: the whole flat
// buffer in stage 0, the rank's partition in 1/2, its shards in 3. The
// optimizer's master weights, gradients and state slots all use the same
// owned-space offsets.
#pragma once

#include <dscore/model.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "core/config/placement.h"
#include "core/config/training_config.h"
#include "core/device/device.h"
#include "core/device/ops.h"
#include "core/model/model.h"
#include "core/offload/swapper.h"
#include "core/zero/param_layout.h"
#include "core/zero/quantized_reduce.h"
#include "core/zero/reduced_gradient_sink.h"
#include "core/zero/reduction.h"

namespace dscore::zero {

// What a stage is given. Pointers are the engine's and outlive the stage.
struct ZeroContext {
  const config::ZeroConfig* zero = nullptr;  // the zero_optimization section's sizes
  // Where the state lives and its dtypes: stage, model and gradient dtypes,
  // whether the master is kept elsewhere, where stage 3's shards are.
  const config::Placement* placement = nullptr;
  int64_t gradient_accumulation_steps = 1;
  Reduction reduction;  // how gradients are averaged across ranks (reduction.h)
  const ParamLayout* layout = nullptr;
  comm::Communicator* comm = nullptr;
  // ZeRO++'s hpZ (stage 3): the group of zero_hpz_partition_size
  // consecutive ranks of `comm` that keeps the secondary partition; null
  // without one.
  comm::Communicator* secondary_comm = nullptr;
  // ZeRO++'s qgZ (stage 3): the node and across-node groups of its two
  // hops (quantized_reduce.h); without them, one hop over `comm`.
  QuantizedReduceGroups quantized_reduce;
  // The engine's device: ZeRO's buffers come from it (zero_memory.h); null
  // for host memory (strategies built without an engine).
  device::Device* device = nullptr;
  device::Stream* stream = nullptr;  // the comm stream
  device::ops::Target comm_target;   // its tasks' device ops run there
  // Where the model writes its gradients (the engine's compute stream):
  // device ops on gradient memory outside the comm stream's tasks.
  device::ops::Target compute_target;
  // Stage 3 parameters on NVMe (Placement::params_on_nvme): the swapper and
  // the rank's folder (param_swap.h); offload_param's max_in_cpu and swap
  // buffers are the placement's.
  offload::Swapper* param_swapper = nullptr;
  std::string param_swap_folder;
  // Where the accumulation boundary's reduced gradients are reported as
  // they become final (reduced_gradient_sink.h: ZeRO-Offload copies them to
  // the host while backward goes on); nullptr: nobody listens.
  ReducedGradientSink* reduced_gradients = nullptr;
  // Flat elements [0, norm_skipped) are left out of the gradient norm:
  // copies of another pipeline stage's tied layer, counted there (stages
  // 0-1 only).
  int64_t norm_skipped = 0;
  // Flat element ranges [first, end), ascending and disjoint, also left out
  // of the norm: the replicated parameters on every tensor-parallel rank
  // but the first (each split parameter's part counts on its own rank).
  std::vector<std::pair<int64_t, int64_t>> norm_excluded;

  dscore_dtype model_dtype() const { return placement->model_dtype; }  // what the model computes
  dscore_dtype grad_dtype() const { return placement->grad_dtype; }    // accumulation, reduction
  // The fp32 master weights of a 16-bit model live outside the strategy
  // (with the offloaded optimizer state: core/owned_state/), or there is
  // none (the 16-bit parameters are the master): it keeps none,
  // owned_master() is nullptr, and initialise() writes only the 16-bit
  // parameters.
  bool master_elsewhere() const {
    return placement->optimizer_offloaded() || placement->low_precision_master();
  }
};

// Reports owned gradients [begin, end) of `ctx` final once `ready` is done
// (ReducedGradientSink); nothing for an empty range or listener.
inline void report_owned_grads_final(const ZeroContext& ctx, int64_t begin, int64_t end,
                                     const device::EventPtr& ready) {
  if (ctx.reduced_gradients != nullptr && begin < end)
    ctx.reduced_gradients->owned_grads_final({{begin, end}}, ready);
}

// Orders the model's use of a layer's views after `ready`: on `views_on`
// without a host wait, or on the host when it is null. Returns the failure
// of the work behind `ready` as far as it is known (all of it on the host).
inline Status order_views_after(const device::EventPtr& ready, device::Stream* views_on) {
  if (views_on == nullptr) return device::wait_for(ready);
  views_on->wait(ready);
  return views_on->status();
}

// A run of one parameter's elements inside the owned space.
struct OwnedSegment {
  size_t param = 0;    // index in the ParamLayout
  int64_t offset = 0;  // in owned space
  int64_t numel = 0;
  int64_t element = 0;  // the parameter's element at `offset`
};

// Gradients in grad_dtype: numel elements from data.
// `counted`, when not empty: the element ranges [first, end) of
// [0, numel) the norm counts (the rest are replicated copies another rank
// counts: tensor parallelism); empty: all of them.
struct GradientShare {
  const void* data = nullptr;
  int64_t numel = 0;
  std::vector<std::pair<int64_t, int64_t>> counted;
};

// A run of one parameter's elements in memory, in the model's dtype.
struct ParamRun {
  size_t param = 0;
  int64_t element = 0;  // first element of the parameter
  int64_t numel = 0;
  const void* data = nullptr;
  // When the run is not in memory (data null): elements [first, first +
  // count) of the run into dst.
  std::function<Status(int64_t first, int64_t count, void* dst)> read = nullptr;
};

class ZeroStrategy {
 public:
  virtual ~ZeroStrategy() = default;

  // Allocate, initialise this rank's parameters through the model's
  // init_param, and make them visible where the model reads them.
  virtual Status initialise(const Model& model) = 0;

  // --- owned space
  virtual int64_t owned_numel() const = 0;
  virtual const std::vector<OwnedSegment>& owned_segments() const = 0;
  virtual float* owned_master() = 0;  // fp32 master weights (owned_numel); see master_elsewhere
  virtual void* owned_grads() = 0;    // grad_dtype (owned_numel), reduced at the boundary
  // model_dtype copy to refresh; nullptr for fp32 models and when the
  // 16-bit parameters are elsewhere (store_params16).
  virtual void* owned_params16() = 0;
  // 16-bit parameters kept outside memory (stage 3 on NVMe): the optimizer
  // hands new values for owned elements [begin, begin + count) here;
  // `begin` is a multiple of kTileGranularity (plan.h).
  virtual bool params16_elsewhere() const { return false; }
  virtual Status store_params16(int64_t begin, int64_t count, const void* values) {
    (void)begin, (void)count, (void)values;
    return internal_error("store_params16 on a strategy that keeps its parameters in memory");
  }
  // This rank's share of the global gradient statistics: the reduced owned
  // gradients (grad_dtype, after the boundary's end_micro_step) whose sum
  // of squares and Inf/NaN flag it contributes. The shares of all ranks
  // cover every gradient element exactly once, so merging their sums in
  // rank order gives the same total on every rank at every stage and world
  // size. The engine sums them on its compute stream (device/ops.h).
  virtual GradientShare gradient_share() = 0;
  // The same as one share per buffer of owned gradients: one, but for a
  // strategy whose owned space joins those of several (expert_split_zero.h).
  virtual std::vector<GradientShare> gradient_shares() { return {gradient_share()}; }
  // The strategies whose owned spaces, one after the other, make this one's:
  // itself, but for expert parallelism's (expert_split_zero.h), whose
  // owned_master/owned_grads/owned_params16 are null.
  virtual std::vector<ZeroStrategy*> domains() { return {this}; }

  // Whether this cycle's gradients are averaged across ranks (an optimizer
  // such as OneBitAdam communicates them itself: optimizer.h
  // wants_reduced_gradients). Only stage 0 can hand out local gradients.
  virtual Status set_gradient_reduction(bool reduce) {
    if (reduce) return Status::Ok();
    return failed_precondition(
        "the optimizer communicates gradients itself (OneBitAdam's compressed phase), which needs "
        "every rank to hold all gradients: use \"zero_optimization\": {\"stage\": 0} (DeepSpeed "
        "also rejects 1-bit optimizers with ZeRO)");
  }

  // --- one micro-step (forward_backward of one micro-batch)
  // `boundary`: this micro-step ends the accumulation cycle.
  virtual void begin_micro_step(bool boundary) = 0;
  // `views_on`: the stream the model's work on the layer's device views is
  // ordered on (the engine's compute stream, when the model asked with
  // DSCORE_VIEWS_STREAM_ORDERED on a device with streams): the views may be
  // made ready in its order (order_views_after). Null: they are ready when
  // acquire returns.
  virtual Status acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                         dscore_layer_views* out) = 0;
  virtual Status release(size_t layer) = 0;
  virtual Status grads_ready(size_t layer) = 0;
  // After the model returned: every reduction due in this micro-step has
  // completed (the boundary's reduced gradients are in owned_grads()).
  virtual Status end_micro_step() = 0;

  // --- the update
  // After the optimizer updated the owned space: bring the new parameters to
  // where the model reads them (stage 1/2: allgather).
  virtual Status after_update() = 0;
  // Enqueued by the engine on its compute stream; `target` says where the
  // fill runs (device/ops.h).
  virtual void zero_grads(device::ops::Target target) = 0;

  // The full model's fp32 master weights in ParamLayout order (collective).
  virtual Status gather_master(std::vector<float>* out) = 0;
  // The same from `owned` (owned_numel fp32 values of this rank's owned
  // space) instead of the strategy's master (which may be elsewhere).
  virtual Status gather_owned(const float* owned, std::vector<float>* out) = 0;

  // The parameters, as the model reads them, that this rank writes into a
  // checkpoint's model states: rank 0 all of them in stages 0-2 (it holds
  // the whole flat copy), every rank its own shards in stage 3.
  virtual std::vector<ParamRun> checkpoint_params() = 0;
  // Every parameter as this rank holds it, where each rank holds them all
  // (stages 0-2; a node-local checkpoint's copy of rank 0's model states);
  // empty where it does not.
  virtual std::vector<ParamRun> replica_params() { return {}; }
  // The part of the owned space this rank writes into its optimizer-state
  // shard: all of it, except in stage 0, where every rank owns everything
  // and each writes the partition stage 1 would give it (no duplicates, and
  // the ranks write in parallel).
  virtual std::vector<OwnedSegment> checkpoint_segments() const { return owned_segments(); }
};

std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroContext& context);

// A ParamRun of `numel` elements (model_dtype) of `param` at `data`, a
// buffer from context.device: read through download() on the comm stream
// (ordered after the update's gathers) when the context has a device, so
// host code never dereferences device memory; `data` itself otherwise.
ParamRun buffer_run(const ZeroContext& context, size_t param, int64_t element, int64_t numel,
                    const void* data);

// Initialise elements [element, element + numel) of `param` through the
// model's init_param: into `master` (fp32) when given, and into `params16`
// (model_dtype) when it is 16-bit. The model writes host memory: the values
// pass through bounded host staging and are uploaded (zero_memory.h) into
// `master` and `params16`, buffers of `device` (host memory when null),
// with copies on `stream`.
Status init_owned(const Model& model, size_t param, int64_t element, int64_t numel, float* master,
                  void* params16, dscore_dtype model_dtype, device::Device* device = nullptr,
                  device::Stream* stream = nullptr);

}  // namespace dscore::zero
