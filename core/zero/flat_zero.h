// ZeRO stages 0, 1 and 2 over one flat, padded buffer (partition.h).
//
//   stage 0: every rank holds and updates everything; at the boundary the
//            gradients are allreduced in buckets of reduce_bucket_size.
//   stage 1: fp32 master weights and optimizer state are partitioned; the
//            full gradients accumulate locally and, at the boundary, each
//            bucket is reduced, in place, into the rank that owns that part.
//   stage 2: gradients are partitioned too: backward writes into IPG
//            buckets of reduce_bucket_size that are reduced into their owners
//            every micro-step as they fill; no full gradient buffer exists.
// After the update, stages 1/2 allgather the new parameters.
//
// Reductions run on the comm thread; with overlap_comm they start while the
// rest of backward runs (a bucket goes as soon as every layer it covers has
// called grads_ready), otherwise after the model returns. Every reduction
// sums in rank order (the comm backend's contract), so for the same
// gradients stages 0, 1 and 2 produce the same bits.
#pragma once

#include <array>
#include <vector>

#include "core/base/memory.h"
#include "core/zero/partition.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

class FlatZero final : public ZeroStrategy {
 public:
  FlatZero(const ZeroContext& context, int stage);

  Status initialise(const Model& model) override;
  int64_t owned_numel() const override { return owned_end_ - owned_begin_; }
  const std::vector<OwnedSegment>& owned_segments() const override { return segments_; }
  float* owned_master() override;
  void* owned_grads() override;
  void* owned_params16() override;
  std::pair<int64_t, int64_t> norm_range() const override;

  Status set_gradient_reduction(bool reduce) override;
  void begin_micro_step(bool boundary) override;
  Status acquire(size_t layer, dscore_acquire_mode mode, dscore_layer_views* out) override;
  Status release(size_t layer) override;
  Status grads_ready(size_t layer) override;
  Status end_micro_step() override;

  Status after_update() override;
  void zero_grads() override;
  Status gather_master(std::vector<float>* out) override;
  std::vector<ParamRun> checkpoint_params() override;
  std::vector<OwnedSegment> checkpoint_segments() const override;

 private:
  // An IPG bucket (stage 2): a window of the flat space filled from its top
  // as backward walks the layers downwards.
  struct Bucket {
    CountedBuffer memory;   // (capacity) grad_dtype; the owner's pieces are reduced in place
    int64_t hi = 0;         // flat end of the window
    int64_t lo = 0;         // flat start of what is placed so far
    int pending = 0;        // placed layers whose grads are not ready yet
    bool sealed = false;    // no more layers go in; reduce once pending == 0
    comm::CommStream::Ticket ticket;  // the reduction in flight, if any
  };

  char* at(void* base, dscore_dtype dtype, int64_t index) const;
  void build_views();
  void note_layer_ready(size_t layer);
  // Boundary reductions of stages 0/1: the fixed bucket grid from the top.
  void submit_ready_grid_buckets(bool all);
  // Stage 2: reduce flat range [lo, hi) held in `memory` (whose element 0
  // is flat index `window`) into the owners' partitions, accumulating.
  comm::CommStream::Ticket submit_owner_reduction(char* memory, int64_t window, int64_t lo,
                                                  int64_t hi);
  // Stage 2 buckets.
  Status place_in_bucket(size_t layer);
  void seal_current_bucket();
  void detach_current_bucket();
  void submit_bucket_if_complete(int index);

  ZeroContext ctx_;
  int stage_;
  int rank_, world_;
  FlatPartition partition_;
  int64_t owned_begin_ = 0, owned_end_ = 0;  // flat range this rank updates
  std::vector<OwnedSegment> segments_;
  int64_t bucket_capacity_ = 0;

  CountedBuffer params_;      // (padded) model_dtype: what the model reads
  CountedBuffer master_;      // (owned) fp32, only for 16-bit models
  CountedBuffer grads_full_;  // (padded) grad_dtype, stages 0/1
  CountedBuffer grad_owned_;  // (owned) grad_dtype, stage 2 (stage 1 uses its slice of grads_full_)
  std::array<Bucket, 2> buckets_;
  int current_bucket_ = 0;
  bool bucket_open_ = false;

  // Views lent to the model: per parameter, over params_ and the gradient
  // memory of the current micro-step.
  std::vector<dscore_tensor> param_views_, grad_views_;
  std::vector<const dscore_tensor*> param_ptrs_;
  std::vector<dscore_tensor*> grad_ptrs_;

  // Per micro-step bookkeeping.
  bool boundary_ = false;
  bool reduce_ = true;  // stage 0 may hand the optimizer local gradients
  std::vector<char> layer_ready_;
  std::vector<int> layer_bucket_;    // stage 2: which bucket holds the layer, -1 none
  size_t lowest_ready_layer_ = 0;    // layers >= this one are all ready
  int64_t grid_next_hi_ = 0;         // stages 0/1: top of the next grid bucket to submit
  // Stage 2: layers larger than a bucket, reduced alone from their own memory.
  // A layer larger than a bucket, or a bucket moved out of the way while
  // some of its layers' gradients were still to come: reduced on its own
  // once `pending` reaches 0.
  struct Oversized {
    CountedBuffer memory;
    int64_t lo = 0, hi = 0;  // flat range
    int pending = 1;
  };
  std::vector<Oversized> oversized_;  // layer_bucket_ = -2 - index
};

}  // namespace dscore::zero
