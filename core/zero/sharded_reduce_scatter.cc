#include "core/zero/sharded_reduce_scatter.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/tensor/dtype_ops.h"
#include "core/zero/plan.h"
#include "core/zero/rank_chunks.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

using tensor::element_at;

ShardedReduceScatter::ShardedReduceScatter(const ZeroContext& context, ShardedStorage& storage,
                                           ShardedGathers& gathers)
    : ctx_(context),
      storage_(storage),
      gathers_(gathers),
      world_(context.comm->world_size()),
      layers_(context.layout->layer_count()) {}

Status ShardedReduceScatter::allocate() {
  DSCORE_ASSIGN_OR_RETURN(grad_part_,
                          allocate_buffer(ctx_.device, storage_.local_numel(), ctx_.grad_dtype(),
                                          MemoryUse::kGradients, "gradient partition"));
  return Status::Ok();
}

void ShardedReduceScatter::zero_grads(device::ops::Target target) {
  device::ops::fill_zero(target, grad_part_.data(), ctx_.grad_dtype(), storage_.local_numel());
  for (LayerGrads& s : layers_) s.partition_clean = true;
}

void ShardedReduceScatter::begin_micro_step(bool boundary) { boundary_ = boundary; }

void ShardedReduceScatter::prepare(const std::vector<size_t>& candidates) {
  std::vector<size_t> layers;
  for (size_t l : candidates)
    if (!layers_[l].grads && !layers_[l].grads_ticket) layers.push_back(l);
  if (layers.empty()) return;
  // Allocated here, zeroed by a comm-stream task off the compute thread.
  // The last user of a bucket is a comm-stream task (flush): scratch of
  // that stream. A failed allocation leaves the entry empty: take_grads
  // allocates it again and reports the Status there.
  auto prepared = std::make_shared<std::vector<device::Buffer>>();
  std::vector<std::pair<void*, int64_t>> to_zero;
  for (size_t l : layers) {
    const int64_t elements = storage_.padded_layer_elements(l);
    Result<device::Buffer> buffer =
        allocate_scratch(ctx_.device, ctx_.stream, elements, ctx_.grad_dtype(), MemoryUse::kBuffers,
                         "gradient bucket");
    prepared->emplace_back();
    if (!buffer.ok()) continue;
    to_zero.emplace_back(buffer->data(), elements);
    prepared->back() = std::move(buffer).value();
  }
  auto ticket = ctx_.stream->submit([this, to_zero, prepared] {
    for (const auto& [data, elements] : to_zero)
      device::ops::fill_zero(ctx_.comm_target, data, ctx_.grad_dtype(), elements);
    return Status::Ok();
  });
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerGrads& s = layers_[layers[i]];
    s.grads_ticket = ticket;
    s.prepared = prepared;
    s.prepared_index = i;
  }
}

Result<std::shared_ptr<device::Buffer>> ShardedReduceScatter::take_grads(size_t layer,
                                                                         device::Stream* views_on) {
  LayerGrads& s = layers_[layer];
  if (s.grads_ticket) {
    DSCORE_RETURN_IF_ERROR(order_views_after(s.grads_ticket, views_on));
    s.grads_ticket.reset();
    device::Buffer buffer = std::move((*s.prepared)[s.prepared_index]);
    s.prepared.reset();
    if (buffer) return std::make_shared<device::Buffer>(std::move(buffer));
  }
  const int64_t elements = storage_.padded_layer_elements(layer);
  DSCORE_ASSIGN_OR_RETURN(device::Buffer buffer,
                          allocate_scratch(ctx_.device, ctx_.stream, elements, ctx_.grad_dtype(),
                                           MemoryUse::kBuffers, "gradient bucket"));
  void* data = buffer.data();
  const device::EventPtr zeroed = ctx_.stream->submit([this, data, elements] {
    device::ops::fill_zero(ctx_.comm_target, data, ctx_.grad_dtype(), elements);
    return Status::Ok();
  });
  DSCORE_RETURN_IF_ERROR(order_views_after(zeroed, views_on));
  return std::make_shared<device::Buffer>(std::move(buffer));
}

Status ShardedReduceScatter::lend(size_t layer, device::Stream* views_on) {
  LayerGrads& s = layers_[layer];
  if (s.grads) return Status::Ok();
  DSCORE_ASSIGN_OR_RETURN(s.grads, take_grads(layer, views_on));
  char* base = static_cast<char*>(s.grads->data());
  const auto es = static_cast<int64_t>(sdk::dtype_size(ctx_.grad_dtype()));
  int64_t offset = 0;
  for (size_t p = ctx_.layout->layer_first(layer); p < ctx_.layout->layer_end(layer); ++p) {
    storage_.grad_view(p).data = base + offset * es;
    offset += storage_.padded(p);
  }
  return Status::Ok();
}

Status ShardedReduceScatter::layer_ready(size_t layer, const ReadyLayers&) {
  LayerGrads& s = layers_[layer];
  if (!s.grads) return Status::Ok();
  int64_t shard_elements = 0;
  for (size_t p = ctx_.layout->layer_first(layer); p < ctx_.layout->layer_end(layer); ++p)
    shard_elements += storage_.shards().params[p].shard_size;
  pending_elements_ += shard_elements * world_;
  pending_.push_back({layer, std::move(s.grads)});
  if (pending_elements_ >= gradient_flush_elements(*ctx_.zero)) return flush();
  return Status::Ok();
}

Status ShardedReduceScatter::end_micro_step(const ReadyLayers&) { return flush(); }

Status ShardedReduceScatter::reduce_grads(const std::vector<PendingGrads>& group, bool clean) {
  const dscore_dtype gd = ctx_.grad_dtype();
  const int64_t es = static_cast<int64_t>(sdk::dtype_size(gd));
  const Reduction& r = ctx_.reduction;
  const ShardedLayout& shards = storage_.shards();
  // Interleave per rank: chunk r = every param's r-th shard, layer after
  // layer (docs/deepspeed-reference.md#stage-3-layout
  // reduce_scatter_coalesced), then one reduce-scatter. The layers come in
  // ascending order, so this rank's shards usually follow each other in the
  // partition as in the chunk.
  std::vector<ShardedRun> runs;
  bool back_to_back = true;
  int64_t first_offset = -1, next_offset = -1;
  for (const PendingGrads& g : group) {
    char* full = static_cast<char*>(g.grads->data());
    for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
      const ParamShard& sh = shards.params[p];
      runs.push_back({full, sh.shard_size});
      full += sh.shard_size * world_ * es;
      if (first_offset < 0) first_offset = sh.local_offset;
      back_to_back = back_to_back && (next_offset < 0 || sh.local_offset == next_offset);
      next_offset = sh.local_offset + sh.shard_size;
    }
  }
  const int64_t chunk = chunk_elements(runs);
  // Clean gradients reduce into the partition itself: no copy to add.
  const bool into_partition = clean && back_to_back;
  DSCORE_ASSIGN_OR_RETURN(device::Buffer send,
                          allocate_scratch(ctx_.device, ctx_.stream, chunk * world_, gd,
                                           MemoryUse::kBuffers, "gradient bucket"));
  device::Buffer recv;
  if (!into_partition) {
    DSCORE_ASSIGN_OR_RETURN(recv, allocate_scratch(ctx_.device, ctx_.stream, chunk, gd,
                                                   MemoryUse::kBuffers, "gradient bucket"));
  }
  void* reduced = into_partition ? element_at(grad_part_.data(), gd, first_offset) : recv.data();
  pack_rank_chunks(ctx_.comm_target, runs, world_, gd, static_cast<char*>(send.data()));
  const device::ops::Target on = ctx_.comm_target;
  device::ops::scale_in_place(on, send.data(), gd, chunk * world_, r.pre_factor);
  if (ctx_.zero->quantized_gradients) {  // ZeRO++'s qgZ, on the CPU engine
    DSCORE_RETURN_IF_ERROR(quantized_reduce_scatter(*ctx_.comm, ctx_.quantized_reduce, send.data(),
                                                    gd, chunk, r.op, reduced, ctx_.device));
  } else {
    DSCORE_RETURN_IF_ERROR(
        ctx_.comm->reduce_scatter(device_buffer(ctx_.device, send.data(), gd, chunk * world_),
                                  device_buffer(ctx_.device, reduced, gd, chunk), r.op));
  }
  device::ops::scale_in_place(on, reduced, gd, chunk, r.post_factor);
  if (into_partition) return Status::Ok();
  int64_t in_chunk = 0;
  for (const PendingGrads& g : group) {
    for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
      const ParamShard& sh = shards.params[p];
      device::ops::accumulate(on, element_at(grad_part_.data(), gd, sh.local_offset),
                              static_cast<const char*>(reduced) + in_chunk * es, gd, sh.shard_size);
      in_chunk += sh.shard_size;
    }
  }
  return Status::Ok();
}

Status ShardedReduceScatter::flush() {
  if (pending_.empty()) return Status::Ok();
  DSCORE_RETURN_IF_ERROR(gathers_.submit_queued());
  std::vector<PendingGrads> group = std::move(pending_);
  pending_.clear();
  pending_elements_ = 0;
  std::sort(group.begin(), group.end(),
            [](const PendingGrads& a, const PendingGrads& b) { return a.layer < b.layer; });
  // One reduce-scatter: gradient_flush_elements keeps it within a bucket
  // and a layer. Clean: no shard of these layers in the gradient partition
  // was written since zero_grads.
  bool clean = true;
  for (const PendingGrads& g : group) {
    LayerGrads& s = layers_[g.layer];
    clean = clean && s.partition_clean;
    s.partition_clean = false;
  }
  device::EventPtr done = ctx_.stream->submit([this, group, clean]() mutable {
    DSCORE_RETURN_IF_ERROR(reduce_grads(group, clean));
    group.clear();  // the full gradients, freed in this task
    return Status::Ok();
  });
  // The boundary's reduce-scatter is the last write of these layers' shards.
  if (boundary_ && ctx_.reduced_gradients != nullptr) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const PendingGrads& g : group)
      for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
        const ParamShard& sh = storage_.shards().params[p];
        if (!ranges.empty() && ranges.back().second == sh.local_offset)
          ranges.back().second += sh.shard_size;
        else
          ranges.emplace_back(sh.local_offset, sh.local_offset + sh.shard_size);
      }
    ctx_.reduced_gradients->owned_grads_final(ranges, done);
  }
  return Status::Ok();
}

}  // namespace dscore::zero
