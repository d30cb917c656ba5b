// ZeRO stage 3's gradient reduction (gradient_reduction.h): a layer's full
// gradients go into a zeroed buffer of their own that the model adds into
// (prepared off the compute thread for the backward passes the prefetch
// sees coming), and once the layer is done they wait with the others until
// gradient_flush_elements (plan.h) are pending; then one reduce-scatter
// hands every rank its shards, added into its gradient partition (or
// reduced straight into it while the partition is clean). In the
// accumulation boundary's micro-step the reduced ranges are reported to the
// ReducedGradientSink as they become final.
#pragma once

#include <memory>
#include <vector>

#include "core/device/device.h"
#include "core/zero/gradient_reduction.h"
#include "core/zero/sharded_gathers.h"
#include "core/zero/sharded_storage.h"

namespace dscore::zero {

class ShardedReduceScatter final : public GradientReduction {
 public:
  // `gathers`: its queued allgathers are submitted before each
  // reduce-scatter, so every rank issues its collectives in one order.
  ShardedReduceScatter(const ZeroContext& context, ShardedStorage& storage,
                       ShardedGathers& gathers);

  Status allocate() override;
  void* owned_grads() override { return grad_part_.data(); }
  void zero_grads(device::ops::Target target) override;

  void begin_micro_step(bool boundary) override;
  Status lend(size_t layer, device::Stream* views_on) override;
  // Stage 3 reduces what the layer's lent buffer holds each time it is done
  // (a layer acquired for backward twice, a tied embedding, lends twice):
  // `ready` is not read.
  Status layer_ready(size_t layer, const ReadyLayers& ready) override;
  Status end_micro_step(const ReadyLayers& ready) override;

  // Zeroed buffers for the coming BACKWARD acquires of `layers`, prepared
  // on the comm stream (those that have one already are skipped).
  void prepare(const std::vector<size_t>& layers);
  // Whether `layer` holds a buffer lent for this micro-step's backward.
  bool lent(size_t layer) const { return layers_[layer].grads != nullptr; }

 private:
  struct LayerGrads {
    std::shared_ptr<device::Buffer> grads;  // this micro-step's full gradients, padded
    // Gradients prepared for the next BACKWARD acquire: entry
    // prepared_index of `prepared`, zero once grads_ticket completed.
    device::EventPtr grads_ticket;
    std::shared_ptr<std::vector<device::Buffer>> prepared;
    size_t prepared_index = 0;
    // Its shards in the gradient partition are still zero since
    // zero_grads: read and cleared by flush on the caller's thread, set
    // again by zero_grads, which the engine runs between steps and waits
    // for.
    bool partition_clean = true;
  };
  struct PendingGrads {
    size_t layer;
    std::shared_ptr<device::Buffer> grads;
  };

  // The layer's zeroed gradient buffer, ready on `views_on`.
  Result<std::shared_ptr<device::Buffer>> take_grads(size_t layer, device::Stream* views_on);
  // Gradients of layers that called grads_ready, reduce-scattered together
  // once they reach gradient_flush_elements (and at the end), after the
  // allgathers queued before them.
  Status flush();
  // Reduce-scatters the group's gradients and adds this rank's shards into
  // its gradient partition, or reduces straight into it when they are
  // `clean` (none of the group's shards there was written since zero_grads)
  // and lie back to back there (on the comm thread).
  Status reduce_grads(const std::vector<PendingGrads>& group, bool clean);

  ZeroContext ctx_;
  ShardedStorage& storage_;
  ShardedGathers& gathers_;
  int world_;
  bool boundary_ = false;     // this micro-step's reduce-scatters make the gradients final
  device::Buffer grad_part_;  // (local) grad_dtype
  std::vector<LayerGrads> layers_;
  std::vector<PendingGrads> pending_;
  int64_t pending_elements_ = 0;
};

}  // namespace dscore::zero
