// ZeRO stages 0, 1 and 2: one FlatStorage (every parameter in one flat,
// padded buffer; partition.h) and the stage's GradientReduction
// (gradient_reduction.h):
//   stage 0: every rank holds and updates everything; AllreduceGrid.
//   stage 1: fp32 master weights and optimizer state are partitioned; the
//            full gradients accumulate locally; OwnerReduceGrid.
//   stage 2: gradients are partitioned too; IpgBuckets.
// After the update, stages 1/2 allgather the new parameters. Reductions run
// on the comm thread; with overlap_comm they start while the rest of
// backward runs, otherwise after the model returns.
#pragma once

#include <memory>
#include <vector>

#include "core/zero/flat_storage.h"
#include "core/zero/gradient_reduction.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

class FlatZero final : public ZeroStrategy {
 public:
  FlatZero(const ZeroContext& context, int stage);

  Status initialise(const Model& model) override;
  int64_t owned_numel() const override { return storage_.owned_numel(); }
  const std::vector<OwnedSegment>& owned_segments() const override { return storage_.segments(); }
  float* owned_master() override { return storage_.owned_master(); }
  void* owned_grads() override { return reduction_->owned_grads(); }
  void* owned_params16() override { return storage_.owned_params16(); }
  GradientShare gradient_share() override;

  Status set_gradient_reduction(bool reduce) override;
  void begin_micro_step(bool boundary) override;
  Status acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                 dscore_layer_views* out) override;
  Status release(size_t) override { return Status::Ok(); }  // parameters stay resident
  Status grads_ready(size_t layer) override;
  Status end_micro_step() override;

  Status after_update() override;
  void zero_grads(device::ops::Target target) override { reduction_->zero_grads(target); }
  Status gather_master(std::vector<float>* out) override;
  Status gather_owned(const float* owned, std::vector<float>* out) override;
  std::vector<ParamRun> checkpoint_params() override;
  std::vector<ParamRun> replica_params() override;
  std::vector<OwnedSegment> checkpoint_segments() const override {
    return storage_.checkpoint_segments();
  }

 private:
  // gather_owned of `owned`, host or device memory (its CommBuffer says).
  Status gather_from(const comm::CommBuffer& owned, std::vector<float>* out);

  ZeroContext ctx_;
  FlatStorage storage_;
  std::unique_ptr<GradientReduction> reduction_;
  ReadyLayers ready_;  // this micro-step's finished layers
};

}  // namespace dscore::zero
