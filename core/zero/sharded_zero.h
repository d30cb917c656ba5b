// ZeRO stage 3: every parameter is partitioned on its own (partition.h
// ShardedLayout); a rank keeps only its shards of the 16-bit parameters,
// fp32 master weights, gradients and optimizer state.
//
//   acquire(layer)     gathers the layer's parameters (one allgather over the
//                      layer's shards, unpacked into full tensors), unless a
//                      prefetch already did;
//   release(layer)     frees them, unless the layer is used again within
//                      stage3_max_reuse_distance elements of the trace;
//   grads_ready(layer) reduce-scatters the layer's gradients into the
//                      owners' shards (one coalesced reduce-scatter).
// The first forward_backward records the acquire trace; later ones prefetch
// upcoming layers along it, gathering up to stage3_prefetch_bucket_size
// elements ahead (in allgathers of whole layers closed at 2^20 elements) while
// the gathered total stays under stage3_max_live_parameters. Gradients of
// finished layers are reduce-scattered together once
// gradient_flush_elements (plan.h) are pending.
// Parameters with at most stage3_param_persistence_threshold elements
// (within stage3_model_persistence_threshold in total) stay gathered and
// are refreshed after every update. With offload_param nvme the shards
// live in a swap file (param_swap.h): gathers read them on the comm thread
// (from a GPU, on the swapper's I/O thread: swapped_gathers.h), and the
// optimizer writes new values through store_params16.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/base/memory.h"
#include "core/device/device.h"
#include "core/zero/acquire_trace.h"
#include "core/zero/param_swap.h"
#include "core/zero/partition.h"
#include "core/zero/swapped_gathers.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

struct Reduction;

class ShardedZero final : public ZeroStrategy {
 public:
  explicit ShardedZero(const ZeroContext& context);

  Status initialise(const Model& model) override;
  int64_t owned_numel() const override { return shards_.local_numel; }
  const std::vector<OwnedSegment>& owned_segments() const override { return segments_; }
  float* owned_master() override;
  void* owned_grads() override { return grad_part_.data(); }
  void* owned_params16() override;
  bool params16_elsewhere() const override { return param_swap_ != nullptr; }
  Status store_params16(int64_t begin, int64_t count, const void* values) override;
  GradientShare gradient_share() override;

  void begin_micro_step(bool boundary) override;
  Status acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                 dscore_layer_views* out) override;
  Status release(size_t layer) override;
  Status grads_ready(size_t layer) override;
  Status end_micro_step() override;

  Status after_update() override;
  void zero_grads(device::ops::Target target) override;
  Status gather_master(std::vector<float>* out) override;
  Status gather_owned(const float* owned, std::vector<float>* out) override;
  std::vector<ParamRun> checkpoint_params() override;

  // Elements of non-persistent parameters currently gathered or in flight.
  int64_t live_elements() const { return live_elements_; }

 private:
  // gather_owned of `owned`, host or device memory (its CommBuffer says).
  Status gather_from(const comm::CommBuffer& owned, std::vector<float>* out);

  enum class Residency { kReleased, kInFlight, kAvailable };
  struct LayerState {
    std::vector<size_t> gathered_params;  // non-persistent params of the layer
    int64_t shard_elements = 0;           // sum of their shard sizes
    int64_t all_shard_elements = 0;       // sum over all the layer's params
    int64_t numel = 0;                    // real elements of gathered_params
    Residency residency = Residency::kReleased;
    std::shared_ptr<device::Buffer> full;  // gathered params, each padded to world x shard
    device::EventPtr ticket;
    // With swapped shards from a GPU, until its allgather is submitted (the
    // ticket set): its gather in swapped_, else 0.
    SwappedGathers::Id gather = 0;
    int acquired = 0;
    size_t last_event = 0;                  // trace index of its latest acquire
    std::shared_ptr<device::Buffer> grads;  // this micro-step's full gradients, padded
    // Gradients prepared for the next BACKWARD acquire: entry
    // prepared_index of `prepared`, zero once grads_ticket completed.
    device::EventPtr grads_ticket;
    std::shared_ptr<std::vector<device::Buffer>> prepared;
    size_t prepared_index = 0;
    // Its shards in the gradient partition are still zero since
    // zero_grads: read and cleared by flush_gradients on the caller's
    // thread, set again by zero_grads, which the engine runs between steps
    // and waits for.
    bool partition_clean = true;
  };
  int64_t padded(size_t param) const;
  // On the comm thread: one allgather of this rank's shards of `params`,
  // rank r's shard of params[i] landing at element r * shard_size of dest[i].
  // The shards are packed here, or already in `staged` (swapped_).
  Status allgather_shards(const std::vector<size_t>& params, const std::vector<char*>& dest,
                          const device::Buffer* staged);
  // Allgathers of `layers` (the released ones), in order, each of whole
  // layers and closed once it holds kAllgatherElements (sharded_zero.cc).
  Status start_gathers(const std::vector<size_t>& layers);
  // The layer's parameters gathered, ready on `views_on` (acquire).
  Status ensure_gathered(size_t layer, device::Stream* views_on);
  Status prefetch_from(size_t position);
  bool reused_soon(size_t layer) const;
  void free_gathered(size_t layer);
  int64_t padded_layer_elements(size_t layer) const;
  void prepare_grads(const std::vector<size_t>& layers);  // zeroed on the comm stream
  // The layer's zeroed gradient buffer, ready on `views_on` (acquire).
  Result<std::shared_ptr<device::Buffer>> take_grads(size_t layer, device::Stream* views_on);
  void point_param_views(size_t layer);
  void finish_trace();
  // Gradients of layers that called grads_ready, reduce-scattered together
  // once they reach gradient_flush_elements (and at the end), after
  // the allgathers queued before them (submit_queued_gathers).
  Status flush_gradients();
  Status gather_persistent();
  // `run(begin, at, count)` for each run of `params` whose shards follow
  // each other in the local space: local elements [begin, begin + count)
  // go to element `at` of the shards packed back to back.
  Status for_each_local_run(
      const std::vector<size_t>& params,
      const std::function<Status(int64_t begin, int64_t at, int64_t count)>& run) const;
  // This rank's shards of `params` packed back to back into `packed`,
  // from memory or the swap file (contiguous shards in one read).
  Status pack_shards(const std::vector<size_t>& params, char* packed);
  // One allgather of this rank's shards of `params` into `dest` (keeping
  // `keep` until it is done), its ticket handed to `submitted` when it is
  // enqueued: at once, or with swapped_ once the shards are read and staged
  // (the returned gather; 0 when submitted at once).
  Result<SwappedGathers::Id> submit_allgather(
      const std::vector<size_t>& params, const std::vector<char*>& dest,
      const std::vector<std::shared_ptr<device::Buffer>>& keep,
      std::function<void(const device::EventPtr&)> submitted);
  // The allgathers queued before this one submitted, so every rank issues
  // its collectives in the same order (before any other collective).
  Status submit_queued_gathers();
  // The queued allgathers whose reads are done submitted, without waiting
  // (at acquire, release and grads_ready).
  Status advance_queued_gathers();
  Status initialise_swapped(const Model& model);

  ZeroContext ctx_;
  bool boundary_ = false;  // this micro-step's reduce-scatters make the gradients final
  int rank_, world_;
  ShardedLayout shards_;
  std::vector<OwnedSegment> segments_;
  std::vector<char> persistent_;
  std::vector<LayerState> layers_;

  device::Buffer param_part_;              // (local) model_dtype shards, unless swapped
  std::unique_ptr<ParamSwap> param_swap_;  // offload_param nvme: the shards' file
  // Swapped shards going to device memory the host does not address (from
  // a GPU): read on the swapper's I/O thread ahead of their allgathers.
  std::unique_ptr<SwappedGathers> swapped_;
  device::Buffer master_;                        // (local) fp32, 16-bit models only
  device::Buffer grad_part_;                     // (local) grad_dtype
  std::vector<device::Buffer> persistent_full_;  // per param (padded), persistent ones only

  std::vector<dscore_tensor> param_views_, grad_views_;
  std::vector<const dscore_tensor*> param_ptrs_;
  std::vector<dscore_tensor*> grad_ptrs_;

  AcquireTrace trace_;           // recorded by the first forward_backward
  size_t position_ = 0;          // events seen in this forward_backward
  size_t prefetched_until_ = 0;  // trace events before this index need no prefetch now
  int64_t live_elements_ = 0;
  struct PendingGrads {
    size_t layer;
    std::shared_ptr<device::Buffer> grads;
  };
  // Reduce-scatters the group's gradients and adds this rank's shards into
  // its gradient partition, or reduces straight into it when they are
  // `clean` (none of the group's shards there was written since zero_grads)
  // and lie back to back there (on the comm thread).
  Status reduce_grads(const std::vector<PendingGrads>& group, bool clean, const Reduction& r);
  std::vector<PendingGrads> pending_grads_;
  int64_t pending_grad_elements_ = 0;
};

}  // namespace dscore::zero
