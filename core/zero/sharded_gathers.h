// ZeRO stage 3's gathers: a layer's parameters are allgathered from every
// rank's shards (sharded_storage.h) when the model acquires it, unless a
// prefetch already did, and freed when it is released, unless it is used
// again within stage3_max_reuse_distance elements of the trace.
//
// The first forward_backward records the acquire trace (acquire_trace.h);
// later ones prefetch upcoming layers along it, gathering up to
// stage3_prefetch_bucket_size elements ahead (in allgathers of whole layers
// closed at 2^20 elements) while the gathered total stays under
// stage3_max_live_parameters. Persistent parameters stay gathered and are
// refreshed after every update. With swapped shards read into device memory
// (swapped_gathers.h) an allgather is submitted once its reads are done; the
// queued ones are submitted in order before any other collective
// (submit_queued), so every rank issues its collectives in one order.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/device/device.h"
#include "core/zero/acquire_trace.h"
#include "core/zero/sharded_storage.h"
#include "core/zero/swapped_gathers.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

class ShardedGathers {
 public:
  ShardedGathers(const ZeroContext& context, ShardedStorage& storage);

  // The persistent parameters' buffers, gathered once (after the storage
  // is initialised).
  Status initialise();

  void begin_micro_step();
  // The model acquires `layer`: its parameters gathered and its views
  // pointed at them, ready on `views_on` (ZeroStrategy::acquire), then the
  // prefetch along the trace. Returns the layers whose BACKWARD acquires
  // fall inside the prefetch window (the gradient buffers to prepare for
  // them: sharded_reduce_scatter.h).
  Result<std::vector<size_t>> acquire(size_t layer, dscore_acquire_mode mode,
                                      device::Stream* views_on);
  Status release(size_t layer);
  // The queued allgathers whose reads are done submitted, without waiting.
  Status advance_queued();
  // Every queued allgather submitted: before any other collective.
  Status submit_queued();
  // After the micro-step's last collective: the trace recorded, if this was
  // the first micro-step.
  void end_micro_step();
  // After the update: gathered copies hold the old values (dropped) and the
  // persistent parameters are gathered again.
  Status after_update();

  // Elements of non-persistent parameters currently gathered or in flight.
  int64_t live_elements() const { return live_elements_; }

 private:
  enum class Residency { kReleased, kInFlight, kAvailable };
  struct LayerGather {
    std::vector<size_t> gathered_params;  // non-persistent params of the layer
    int64_t shard_elements = 0;           // sum of their shard sizes
    int64_t numel = 0;                    // real elements of gathered_params
    Residency residency = Residency::kReleased;
    std::shared_ptr<device::Buffer> full;  // gathered params, each padded to world x shard
    device::EventPtr ticket;
    // With swapped shards from a GPU, until its allgather is submitted (the
    // ticket set): its gather in storage.swapped(), else 0.
    SwappedGathers::Id gather = 0;
    int acquired = 0;
    size_t last_event = 0;                              // trace index of its latest acquire
    dscore_acquire_mode mode = DSCORE_ACQUIRE_FORWARD;  // of its latest acquire
    bool secondary_valid = false;  // ZeRO++ hpZ: its pieces hold the current parameters
  };

  // On the comm thread: one allgather of this rank's shards of `params`,
  // rank r's shard of params[i] landing at element r * shard_size of dest[i].
  // The shards are packed here, or already in `staged` (swapped).
  Status allgather_shards(const std::vector<size_t>& params, const std::vector<char*>& dest,
                          const device::Buffer* staged);
  // The same allgather of `elements` values per rank as int8 (ZeRO++'s
  // quantized weights), dequantized into `gathered` (world x elements).
  Status allgather_quantized(const char* chunk, int64_t elements, void* gathered);
  // ZeRO++'s hpZ: `params` gathered from the secondary partition over the
  // secondary group (the node's ranks), each rank's piece of params[i]
  // landing at its place in dest[i].
  Status allgather_secondary(const std::vector<size_t>& params, const std::vector<char*>& dest);
  // The layer's pieces copied from its gathered parameters (after a forward
  // acquire: the backward gathers them).
  void keep_secondary(size_t layer);
  int64_t secondary_piece(size_t param) const { return storage_.padded(param) / secondary_size_; }
  // Allgathers of `layers` (the released ones), in order, each of whole
  // layers and closed once it holds kAllgatherElements (sharded_gathers.cc).
  Status start_gathers(const std::vector<size_t>& layers);
  // The layer's parameters gathered, ready on `views_on`.
  Status ensure_gathered(size_t layer, device::Stream* views_on);
  Result<std::vector<size_t>> prefetch_from(size_t position);
  bool reused_soon(size_t layer) const;
  void free_gathered(size_t layer);
  void point_param_views(size_t layer);
  Status gather_persistent();
  // One allgather of this rank's shards of `params` into `dest` (keeping
  // `keep` until it is done), its ticket handed to `submitted` when it is
  // enqueued: at once, or with swapped shards once they are read and staged
  // (the returned gather; 0 when submitted at once).
  // `secondary`: from the secondary partition (allgather_secondary).
  Result<SwappedGathers::Id> submit_allgather(
      const std::vector<size_t>& params, const std::vector<char*>& dest,
      const std::vector<std::shared_ptr<device::Buffer>>& keep,
      std::function<void(const device::EventPtr&)> submitted, bool secondary = false);

  ZeroContext ctx_;
  ShardedStorage& storage_;
  int world_;
  SwappedGathers* swapped_;  // the storage's, when its shards are read ahead
  std::vector<LayerGather> layers_;
  std::vector<device::Buffer> persistent_full_;  // per param (padded), persistent ones only
  // ZeRO++ hpZ: this rank's piece (padded / secondary_size_ elements) of
  // every non-persistent parameter, at secondary_at_[param].
  int secondary_size_ = 1;
  device::Buffer secondary_;
  std::vector<int64_t> secondary_at_;

  AcquireTrace trace_;           // recorded by the first forward_backward
  size_t position_ = 0;          // events seen in this forward_backward
  size_t prefetched_until_ = 0;  // trace events before this index need no prefetch now
  int64_t live_elements_ = 0;
};

}  // namespace dscore::zero
