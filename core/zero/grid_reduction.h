// Gradient reductions of stages 0 and 1 over the full gradients: the flat
// space is reduced in a fixed grid of reduce_bucket_size buckets from the top
// down. With overlap_comm a bucket goes as soon as every layer above its
// start is ready; otherwise all go after the model returns.
// With one micro-batch per step (or one rank) the reduction runs at the
// accumulation boundary. With gradient accumulation across ranks it runs
// every micro-step and the reduced means are summed into `accumulated_`, the
// order stages 2 and 3 must use (they cannot keep the full local gradients),
// so every stage gives the same bits (docs/zero.md#determinism); DeepSpeed's
// stages 0/1 reduce only at the boundary (docs/deepspeed-differences.md).
//   AllreduceGrid (stage 0):   each bucket allreduced, every rank keeps all;
//   OwnerReduceGrid (stage 1): each bucket's pieces reduced, in place, into
//                              the rank that owns them.
#pragma once

#include "core/base/memory.h"
#include "core/device/device.h"
#include "core/zero/gradient_reduction.h"
#include "core/zero/reduction.h"

namespace dscore::zero {

class GridReduction : public GradientReduction {
 public:
  GridReduction(const ZeroContext& context, FlatStorage& storage);

  Status allocate() override;
  void* owned_grads() override;
  void zero_grads(device::ops::Target target) override;
  void begin_micro_step(bool boundary) override;
  // The views point into grads_ for good.
  Status lend(size_t, device::Stream*) override { return Status::Ok(); }
  Status layer_ready(size_t layer, const ReadyLayers& ready) override;
  Status end_micro_step(const ReadyLayers& ready) override;

 protected:
  // On the comm thread: reduce flat range [lo, hi) of the full gradients,
  // already multiplied by r.pre_factor.
  virtual Status reduce_bucket(int64_t lo, int64_t hi, const Reduction& r) = 0;
  void set_reduce_flag(bool reduce) { reduce_ = reduce; }
  char* grads_at(int64_t flat_index);
  // Reduce every micro-step into accumulated_ (see the top of this file).
  bool reduces_every_micro_step() const { return every_micro_step_ && reduce_; }

  ZeroContext ctx_;
  FlatStorage& storage_;

 private:
  bool reduces_now() const;  // this micro-step reduces
  // Queue the grid buckets whose layers are all ready (all: every one left).
  void submit_ready(bool all, const ReadyLayers& ready);

  int64_t bucket_capacity_ = 0;
  device::Buffer grads_;        // (padded) grad_dtype: the full gradients
  device::Buffer accumulated_;  // (owned) grad_dtype, when every_micro_step_
  bool every_micro_step_ = false;
  bool boundary_ = false;
  bool reduce_ = true;
  int64_t next_hi_ = 0;  // top of the next grid bucket to submit
};

class AllreduceGrid final : public GridReduction {
 public:
  using GridReduction::GridReduction;
  bool can_skip_reduction() const override { return true; }
  void set_reduce(bool reduce) override { set_reduce_flag(reduce); }

 protected:
  Status reduce_bucket(int64_t lo, int64_t hi, const Reduction& r) override;
};

class OwnerReduceGrid final : public GridReduction {
 public:
  using GridReduction::GridReduction;

 protected:
  Status reduce_bucket(int64_t lo, int64_t hi, const Reduction& r) override;
};

}  // namespace dscore::zero
