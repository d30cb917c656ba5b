// ZeRO stage 3: every parameter is partitioned on its own, and a rank keeps
// only its shards of the 16-bit parameters, fp32 master weights, gradients
// and optimizer state. Three parts, in the shape of stages 0-2's FlatZero:
//   ShardedStorage        (sharded_storage.h)         the shards and the views;
//   ShardedGathers        (sharded_gathers.h)         acquire gathers a layer (with
//                                                      trace-based prefetch), release frees it;
//   ShardedReduceScatter  (sharded_reduce_scatter.h)  grads_ready reduce-scatters the
//                                                      layers' gradients into the owners'
//                                                      shards (the GradientReduction).
#pragma once

#include <memory>
#include <vector>

#include "core/zero/gradient_reduction.h"
#include "core/zero/sharded_gathers.h"
#include "core/zero/sharded_reduce_scatter.h"
#include "core/zero/sharded_storage.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

class ShardedZero final : public ZeroStrategy {
 public:
  explicit ShardedZero(const ZeroContext& context);

  Status initialise(const Model& model) override;
  int64_t owned_numel() const override { return storage_.local_numel(); }
  const std::vector<OwnedSegment>& owned_segments() const override { return storage_.segments(); }
  float* owned_master() override { return storage_.owned_master(); }
  void* owned_grads() override { return reduction_.owned_grads(); }
  void* owned_params16() override { return storage_.owned_params16(); }
  bool params16_elsewhere() const override { return storage_.swaps_params(); }
  Status store_params16(int64_t begin, int64_t count, const void* values) override;
  GradientShare gradient_share() override;

  void begin_micro_step(bool boundary) override;
  Status acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                 dscore_layer_views* out) override;
  Status release(size_t layer) override;
  Status grads_ready(size_t layer) override;
  Status end_micro_step() override;

  Status after_update() override { return gathers_.after_update(); }
  void zero_grads(device::ops::Target target) override { reduction_.zero_grads(target); }
  Status gather_master(std::vector<float>* out) override;
  Status gather_owned(const float* owned, std::vector<float>* out) override;
  std::vector<ParamRun> checkpoint_params() override { return storage_.checkpoint_params(); }

  // Elements of non-persistent parameters currently gathered or in flight.
  int64_t live_elements() const { return gathers_.live_elements(); }

 private:
  // gather_owned of `owned`, host or device memory (its CommBuffer says).
  Status gather_from(const comm::CommBuffer& owned, std::vector<float>* out);

  ZeroContext ctx_;
  ShardedStorage storage_;
  ShardedGathers gathers_;
  ShardedReduceScatter reduction_;
  ReadyLayers ready_;  // unused by stage 3's reduction (sharded_reduce_scatter.h)
};

}  // namespace dscore::zero
