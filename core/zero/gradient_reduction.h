// How a ZeRO stage reduces gradients across ranks: the gradient memory it
// keeps, where the model's grad views point, and when each reduction is
// queued on the comm stream. One type per stage:
//   stage 0  AllreduceGrid         (grid_reduction.h)  allreduce at the boundary
//   stage 1  OwnerReduceGrid       (grid_reduction.h)  reduce into owners at the boundary
//   stage 2  IpgBuckets            (ipg_buckets.h)     reduce into owners as buckets fill
//   stage 3  ShardedReduceScatter  (sharded_reduce_scatter.h)  reduce-scatter into shards
//            once gradient_flush_elements are pending
// Stages 0-2 work over one FlatStorage, stage 3 over its ShardedStorage.
// Every reduction sums in rank order (the comm backend's contract), so for
// the same gradients the three produce the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/zero/flat_storage.h"
#include "core/zero/plan.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

// Which layers' gradients are final in this micro-step. Backward walks the
// layers downwards, so "every layer from lowest() up is ready" is what lets
// the part of the flat space above a layer's first parameter go.
class ReadyLayers {
 public:
  void reset(size_t layer_count) {
    ready_.assign(layer_count, 0);
    lowest_ = layer_count;
  }
  // Marks `layer` ready; false when it already was.
  bool mark(size_t layer) {
    if (ready_[layer]) return false;
    ready_[layer] = 1;
    while (lowest_ > 0 && ready_[lowest_ - 1]) --lowest_;
    return true;
  }
  bool ready(size_t layer) const { return ready_[layer] != 0; }
  size_t lowest() const { return lowest_; }  // layers >= this one are all ready
  size_t count() const { return ready_.size(); }

 private:
  std::vector<char> ready_;
  size_t lowest_ = 0;
};

class GradientReduction {
 public:
  virtual ~GradientReduction() = default;

  // Allocate this stage's gradient memory (zeroed) and point the grad views
  // that never move.
  virtual Status allocate() = 0;
  // (owned) grad_dtype: the reduced gradients the optimizer reads.
  virtual void* owned_grads() = 0;
  virtual void zero_grads(device::ops::Target target) = 0;

  // Only a stage whose ranks hold every gradient can skip the reduction (an
  // optimizer that communicates itself: ZeroStrategy::set_gradient_reduction).
  virtual bool can_skip_reduction() const { return false; }
  virtual void set_reduce(bool) {}

  virtual void begin_micro_step(bool boundary) = 0;
  // A BACKWARD acquire of `layer`: make its grad views point at memory the
  // model can add into (ready on `views_on`: ZeroStrategy::acquire).
  virtual Status lend(size_t layer, device::Stream* views_on) = 0;
  // `layer` just became ready (`ready` already says so); may queue reductions.
  virtual Status layer_ready(size_t layer, const ReadyLayers& ready) = 0;
  // After the model returned: every reduction due in this micro-step done.
  virtual Status end_micro_step(const ReadyLayers& ready) = 0;
};

// Elements of one reduction bucket at stages 0-2: reduce_bucket_size, or
// 2^24 where that is smaller (gradient_flush_elements, as stage 3 flushes),
// within [1, padded]. DeepSpeed's default bucket (5e8) holds a whole 100M
// model: a bucket, and the reduction's staging, of its full gradients.
inline int64_t bucket_elements(const ZeroContext& ctx, const FlatPartition& partition) {
  return std::clamp<int64_t>(gradient_flush_elements(*ctx.zero), 1, partition.padded_numel);
}

}  // namespace dscore::zero
