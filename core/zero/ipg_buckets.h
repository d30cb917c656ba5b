// Stage 2's gradient reduction: no full gradient buffer exists. Backward
// writes each layer's gradients into an IPG bucket of reduce_bucket_size
// elements, a window of the flat space filled from its top as backward
// walks the layers downwards; a bucket is reduced into the owners'
// partitions (accumulating into the owned gradients) every micro-step, as
// soon as it is sealed and all its layers are ready. With overlap_comm two
// buckets alternate so one fills while the other is reduced.
#pragma once

#include <array>
#include <vector>

#include "core/base/memory.h"
#include "core/device/device.h"
#include "core/zero/gradient_reduction.h"

namespace dscore::zero {

class IpgBuckets final : public GradientReduction {
 public:
  IpgBuckets(const ZeroContext& context, FlatStorage& storage);

  Status allocate() override;
  void* owned_grads() override { return owned_.data(); }
  void zero_grads(device::ops::Target target) override;
  void begin_micro_step(bool boundary) override;
  Status lend(size_t layer, device::Stream* views_on) override;
  Status layer_ready(size_t layer, const ReadyLayers& ready) override;
  Status end_micro_step(const ReadyLayers& ready) override;

 private:
  struct Bucket {
    device::Buffer
        memory;           // (capacity) grad_dtype, zero while free; element 0 is flat hi - capacity
    int64_t hi = 0;       // flat end of the window
    int64_t lo = 0;       // flat start of what is placed so far
    int pending = 0;      // placed layers whose grads are not ready yet
    bool sealed = false;  // no more layers go in; reduce once pending == 0
    device::EventPtr ticket;  // the reduction in flight, if any
  };
  // A flat range reduced on its own, from its own memory, once `pending`
  // reaches 0: a layer larger than a bucket, or a bucket detached while
  // some of its layers' gradients were still to come.
  struct Solo {
    device::Buffer memory;  // (hi - lo) grad_dtype, comm-stream scratch; element 0 is flat lo
    int64_t lo = 0, hi = 0;
    int pending = 1;
  };
  // Where a layer's gradients live in this micro-step.
  struct Placement {
    enum class Kind { kNotLent, kBucket, kSolo };
    Kind kind = Kind::kNotLent;
    size_t index = 0;  // into buckets_ or solos_
  };

  Status place(size_t layer, device::Stream* views_on);
  Status place_solo(size_t layer, device::Stream* views_on);
  Status open_bucket(int64_t hi, device::Stream* views_on);
  Status detach_current_bucket(device::Stream* views_on);
  // Memory for a solo of `elements`: scratch of the comm stream (whose
  // reduction task is its last user), ready for the model's stream in its
  // order (order_views_after), zeroed first when `zero`.
  Result<device::Buffer> solo_memory(int64_t elements, bool zero, device::Stream* views_on);
  void seal_current_bucket();
  void submit_bucket_if_complete(size_t index);
  // Queue the reduction of flat [lo, hi) held in `memory` (whose element 0
  // is flat index `window`) into the owners' partitions, accumulating.
  device::EventPtr submit_owner_reduction(char* memory, int64_t window, int64_t lo, int64_t hi);

  ZeroContext ctx_;
  FlatStorage& storage_;
  int64_t capacity_ = 0;   // elements per bucket
  size_t bucket_count_;    // 2 with overlap_comm, else 1
  device::Buffer owned_;   // (owned) grad_dtype: the reduced gradients
  bool boundary_ = false;  // this micro-step's reductions make them final
  std::array<Bucket, 2> buckets_;
  size_t current_ = 0;
  bool open_ = false;                 // buckets_[current_] takes more layers
  std::vector<Placement> placement_;  // per layer
  std::vector<Solo> solos_;
};

}  // namespace dscore::zero
