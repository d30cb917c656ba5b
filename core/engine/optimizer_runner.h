// Runs the optimizer plugin over this rank's owned space, tile by tile of
// its OwnedState (owned_state.h: the master weights and the optimizer's
// declared slots, in memory or streamed from NVMe). For each tile, the
// tensor views step() receives: one group per weight-decay multiplier
// (parameters the model flags DSCORE_PARAM_NO_WEIGHT_DECAY get 0) and, for
// an optimizer that preconditions whole parameters (optimizer.h, Muon:
// preconditioner.h), per whether its parameters are preconditioned; each
// tensor a run of one parameter's elements within the tile. The optimizers
// the stages accept are elementwise, so any tiling gives the same bits.
// Writes the 16-bit model copy in the same pass when the plugin fuses it,
// else converts after.
#pragma once

#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/device/ops.h"
#include "core/owned_state/owned_state.h"
#include "core/plugin_host/instances.h"
#include "core/zero/param_layout.h"
#include "core/zero/plan.h"
#include "core/zero/zero_strategy.h"

namespace dscore {

// Where the owned tensors live and the update runs: the engine's compute
// stream as an ops target (its `stream` is what the plugin receives), and
// the device the tensor views name.
struct StepTarget {
  device::ops::Target ops;
  dscore_device_type device_type = DSCORE_DEVICE_CPU;
  int32_t device_id = 0;
};

class OptimizerRunner {
 public:
  // Fails when the optimizer needs whole tensors (LAMB) but the stage
  // splits them, naming the plugin and the fix.
  static Result<std::unique_ptr<OptimizerRunner>> create(
      std::unique_ptr<plugin_host::OptimizerInstance> instance, zero::ZeroStrategy* strategy,
      std::unique_ptr<OwnedState> state, const ParamLayout& layout, dscore_dtype model_dtype,
      dscore_dtype grad_dtype, int stage);

  const plugin_host::OptimizerInstance& instance() const { return *instance_; }
  plugin_host::OptimizerInstance& instance() { return *instance_; }
  std::vector<zero::StateSlot> slots() const;
  // The hyper-parameters of update number `step` (1-based) at the
  // scheduled `point`, every gradient times `grad_scale` (weight decay
  // multiplier 1, no group flags).
  static dscore_optimizer_hparams hparams_at(const dscore_schedule_point& point, int64_t step,
                                             double grad_scale);
  // The layout's parameters the optimizer preconditions whole, ascending
  // (empty for an optimizer without precondition()).
  const std::vector<size_t>& preconditioned() const { return preconditioned_; }

  // Whether the host averages gradients before update `step` (optimizer.h).
  Result<bool> wants_reduced_gradients(int64_t step) const {
    return instance_->wants_reduced_gradients(step);
  }

  // One update of `part` (one of state().parts()) with the scheduled point
  // (lr, beta overrides) as update number `step` (1-based); every gradient
  // is multiplied by grad_scale. A part on the host runs on the caller with
  // the host's target; the others as a task of the stream `target` names
  // (on CUDA it enqueues).
  Status step(OwnedState& part, const dscore_schedule_point& point, int64_t step, double grad_scale,
              const StepTarget& target);

  // Where the master weights and slots live (checkpoints read and write it).
  OwnedState& state() { return *state_; }
  // Write the model's 16-bit copy of the owned space from the fp32 master
  // weights (after a checkpoint replaced them); nothing for fp32 models.
  // On the host, unless called inside step().
  Status write_16bit_copy();

 private:
  // Owned segments that step() takes in one call.
  struct SegmentGroup {
    double weight_decay_multiplier = 1;
    uint32_t flags = 0;  // DSCORE_OPTIMIZER_GROUP_*
    std::vector<zero::OwnedSegment> segments;
  };
  struct Group {
    double weight_decay_multiplier = 1;
    std::vector<zero::OwnedSegment> segments;                    // clipped to the tile
    std::vector<std::vector<int64_t>> shapes;                    // per segment: {numel}
    std::vector<std::vector<int64_t>> state_shapes;              // per slot x segment
    std::vector<dscore_tensor> params, grads, states, params16;  // states: slot-major
    std::vector<dscore_tensor*> param_ptrs, state_ptrs, p16_ptrs;
    std::vector<const dscore_tensor*> grad_ptrs;
  };
  OptimizerRunner() = default;
  // The tile's part of `segments`, with views into the tile. `on_host`: the
  // tile is of a state on the host (OwnedState::on_host()).
  void build_group(Group* group, const SegmentGroup& segments, const StateTile& tile, bool on_host);
  Status step_tile(const StateTile& tile, bool on_host, dscore_optimizer_hparams* hparams);
  // write_16bit_copy() for one part that is not on the host.
  Status write_16bit_part(OwnedState& part);
  // The tile's 16-bit parameters from its master weights, in memory or
  // through the strategy's store_params16.
  Status write_16bit_tile(const StateTile& tile);
  // The rest of a staged tile's 16-bit parameters (StateTile::params16)
  // from its master weights: what the step did not write, the gaps between
  // segments, or all of it when the optimizer does not fuse the copy.
  void finish_staged_16bit(const StateTile& tile);

  std::unique_ptr<plugin_host::OptimizerInstance> instance_;
  zero::ZeroStrategy* strategy_ = nullptr;
  dscore_dtype model_dtype_ = DSCORE_DTYPE_F32;
  dscore_dtype grad_dtype_ = DSCORE_DTYPE_F32;
  std::unique_ptr<OwnedState> state_;
  std::vector<SegmentGroup> groups_;  // non-empty; by weight decay and preconditioning
  std::vector<size_t> preconditioned_;
  bool fuse_16bit_ = true;  // until the plugin says UNIMPLEMENTED
  StepTarget target_;       // of the step in progress, else the host
};

}  // namespace dscore
