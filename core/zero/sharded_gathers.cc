#include "core/zero/sharded_gathers.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "core/tensor/dtype_ops.h"
#include "core/zero/quantization.h"
#include "core/zero/rank_chunks.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

using tensor::element_at;

namespace {

// Elements (all ranks') after which a prefetch's allgather is closed and
// the next layer starts another. One allgather for a whole prefetch bucket
// (5e7 elements by default) kept the model waiting for all of it before
// its first layer; one per layer made 150 layers of 9216 elements take 150
// calls, five times the communication time at 2 ranks over mpi
// (bench/README.md#stage-3-gathers). 2^20 elements is 2-4 MB, past the size
// where mpi and NCCL calls reach their bandwidth.
constexpr int64_t kAllgatherElements = int64_t{1} << 20;

}  // namespace

ShardedGathers::ShardedGathers(const ZeroContext& context, ShardedStorage& storage)
    : ctx_(context),
      storage_(storage),
      world_(context.comm->world_size()),
      swapped_(nullptr),
      layers_(context.layout->layer_count()) {
  const auto& params = ctx_.layout->params();
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerGather& s = layers_[l];
    for (size_t p = ctx_.layout->layer_first(l); p < ctx_.layout->layer_end(l); ++p) {
      if (storage_.persistent(p)) continue;
      s.gathered_params.push_back(p);
      s.shard_elements += storage_.shards().params[p].shard_size;
      s.numel += params[p].numel;
    }
  }
}

Status ShardedGathers::initialise() {
  swapped_ = storage_.swapped();
  const size_t count = ctx_.layout->params().size();
  if (ctx_.secondary_comm != nullptr) {
    secondary_size_ = ctx_.secondary_comm->world_size();
    int64_t total = 0;
    secondary_at_.assign(count, -1);
    for (size_t p = 0; p < count; ++p) {
      if (storage_.persistent(p)) continue;
      secondary_at_[p] = total;
      total += secondary_piece(p);
    }
    DSCORE_ASSIGN_OR_RETURN(
        secondary_, allocate_buffer(ctx_.device, total, ctx_.model_dtype(), MemoryUse::kBuffers,
                                    "the secondary parameter partition"));
  }
  persistent_full_.resize(count);
  for (size_t p = 0; p < count; ++p) {
    if (!storage_.persistent(p)) continue;
    DSCORE_ASSIGN_OR_RETURN(persistent_full_[p],
                            allocate_buffer(ctx_.device, storage_.padded(p), ctx_.model_dtype(),
                                            MemoryUse::kBuffers, "persistent parameters"));
    storage_.param_view(p).data = persistent_full_[p].data();
  }
  return gather_persistent();
}

// --------------------------------------------------------------- gathering

Result<SwappedGathers::Id> ShardedGathers::submit_allgather(
    const std::vector<size_t>& params, const std::vector<char*>& dest,
    const std::vector<std::shared_ptr<device::Buffer>>& keep,
    std::function<void(const device::EventPtr&)> submitted, bool secondary) {
  if (secondary) {
    submitted(ctx_.stream->submit(
        [this, params, dest, keep] { return allgather_secondary(params, dest); }));
    return SwappedGathers::Id{0};
  }
  std::shared_ptr<device::Buffer> staged;  // the shards, packed by swapped_'s copies
  if (swapped_) {
    const dscore_dtype md = ctx_.model_dtype();
    int64_t shard_elements = 0;
    for (size_t p : params) shard_elements += storage_.shards().params[p].shard_size;
    // Scratch in the comm stream's order, held by the tasks that use it.
    DSCORE_ASSIGN_OR_RETURN(device::Buffer buffer,
                            allocate_scratch(ctx_.device, ctx_.stream, shard_elements, md,
                                             MemoryUse::kBuffers, "gathered parameters"));
    staged = std::make_shared<device::Buffer>(std::move(buffer));
    DSCORE_RETURN_IF_ERROR(
        storage_.for_each_local_run(params, [&](int64_t begin, int64_t at, int64_t count) {
          return swapped_->add(staged, begin, at, count);
        }));
  }
  auto submit = [this, params, dest, keep, staged, submitted = std::move(submitted)] {
    submitted(ctx_.stream->submit([this, params, dest, keep, staged] {
      return allgather_shards(params, dest, staged.get());
    }));
    return Status::Ok();
  };
  if (!swapped_) {
    (void)submit();
    return SwappedGathers::Id{0};
  }
  return swapped_->end(std::move(submit));
}

Status ShardedGathers::submit_queued() {
  return swapped_ ? swapped_->complete_all() : Status::Ok();
}

Status ShardedGathers::advance_queued() { return swapped_ ? swapped_->advance() : Status::Ok(); }

Status ShardedGathers::allgather_shards(const std::vector<size_t>& params,
                                        const std::vector<char*>& dest,
                                        const device::Buffer* staged) {
  // Pack this rank's shards, one allgather, then unpack each rank's chunk:
  // rank r's shard of params[i] goes to element r * shard_size of dest[i].
  const dscore_dtype md = ctx_.model_dtype();
  std::vector<ShardedRun> runs;
  for (size_t i = 0; i < params.size(); ++i)
    runs.push_back({dest[i], storage_.shards().params[params[i]].shard_size});
  const int64_t shard_elements = chunk_elements(runs);
  // Dropped at the end of this comm-stream task, maybe before the copies
  // queued on it: scratch, freed in the stream's order.
  device::Buffer packed;
  if (staged == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(packed, allocate_scratch(ctx_.device, ctx_.stream, shard_elements, md,
                                                     MemoryUse::kBuffers, "gathered parameters"));
    DSCORE_RETURN_IF_ERROR(storage_.pack_shards(params, static_cast<char*>(packed.data())));
  }
  DSCORE_ASSIGN_OR_RETURN(device::Buffer gathered,
                          allocate_scratch(ctx_.device, ctx_.stream, shard_elements * world_, md,
                                           MemoryUse::kBuffers, "gathered parameters"));
  char* pk = static_cast<char*>(staged != nullptr ? staged->data() : packed.data());
  if (ctx_.zero->quantized_weights) {
    DSCORE_RETURN_IF_ERROR(allgather_quantized(pk, shard_elements, gathered.data()));
  } else {
    DSCORE_RETURN_IF_ERROR(ctx_.comm->allgather(
        device_buffer(ctx_.device, pk, md, shard_elements),
        device_buffer(ctx_.device, gathered.data(), md, shard_elements * world_)));
  }
  unpack_rank_chunks(ctx_.comm_target, static_cast<const char*>(gathered.data()), runs, world_, md);
  return Status::Ok();
}

// ZeRO++'s qwZ: every rank's chunk travels as int8 blocks with their
// scales (quantization.h), and every rank's values, its own included, are
// the dequantized ones, so all ranks compute on the same parameters. The
// engine runs it on the CPU only (host memory).
Status ShardedGathers::allgather_quantized(const char* chunk, int64_t elements, void* gathered) {
  const dscore_dtype md = ctx_.model_dtype();
  const int64_t bytes = quantized_bytes(elements, QuantBits::kInt8);
  std::vector<char> mine(static_cast<size_t>(bytes));
  std::vector<char> all(static_cast<size_t>(bytes * world_));
  quantize(chunk, md, elements, QuantBits::kInt8, mine.data());
  DSCORE_RETURN_IF_ERROR(ctx_.comm->allgather(
      device_buffer(ctx_.device, mine.data(), DSCORE_DTYPE_U8, bytes),
      device_buffer(ctx_.device, all.data(), DSCORE_DTYPE_U8, bytes * world_)));
  const size_t es = sdk::dtype_size(md);
  for (int r = 0; r < world_; ++r)
    dequantize(all.data() + static_cast<size_t>(r) * static_cast<size_t>(bytes), elements,
               QuantBits::kInt8,
               static_cast<char*>(gathered) + static_cast<size_t>(r * elements) * es, md);
  return Status::Ok();
}

Status ShardedGathers::allgather_secondary(const std::vector<size_t>& params,
                                           const std::vector<char*>& dest) {
  // The node's copy is exact: gathered without quantization, the backward
  // sees the parameters the forward saw.
  const dscore_dtype md = ctx_.model_dtype();
  const size_t es = sdk::dtype_size(md);
  std::vector<ShardedRun> runs;
  for (size_t i = 0; i < params.size(); ++i) runs.push_back({dest[i], secondary_piece(params[i])});
  const int64_t chunk = chunk_elements(runs);
  std::vector<char> mine(static_cast<size_t>(chunk) * es);
  std::vector<char> all(mine.size() * static_cast<size_t>(secondary_size_));
  int64_t at = 0;
  for (size_t p : params) {
    std::memcpy(mine.data() + static_cast<size_t>(at) * es,
                element_at(secondary_.data(), md, secondary_at_[p]),
                static_cast<size_t>(secondary_piece(p)) * es);
    at += secondary_piece(p);
  }
  DSCORE_RETURN_IF_ERROR(ctx_.secondary_comm->allgather(
      device_buffer(ctx_.device, mine.data(), md, chunk),
      device_buffer(ctx_.device, all.data(), md, chunk * secondary_size_)));
  unpack_rank_chunks(ctx_.comm_target, all.data(), runs, secondary_size_, md);
  return Status::Ok();
}

void ShardedGathers::keep_secondary(size_t layer) {
  LayerGather& s = layers_[layer];
  if (secondary_size_ == 1 || s.secondary_valid || !s.full) return;
  // On the comm stream: after the layer's gather, before any gather of
  // the pieces.
  (void)ctx_.stream->submit([this, layer, full = s.full] {
    const dscore_dtype md = ctx_.model_dtype();
    const size_t es = sdk::dtype_size(md);
    const int me = ctx_.secondary_comm->rank();
    int64_t offset = 0;
    for (size_t p : layers_[layer].gathered_params) {
      const int64_t piece = secondary_piece(p);
      std::memcpy(element_at(secondary_.data(), md, secondary_at_[p]),
                  element_at(full->data(), md, offset + me * piece),
                  static_cast<size_t>(piece) * es);
      offset += storage_.padded(p);
    }
    return Status::Ok();
  });
  s.secondary_valid = true;
}

Status ShardedGathers::start_gathers(const std::vector<size_t>& layers) {
  const dscore_dtype md = ctx_.model_dtype();
  // Allocate every layer's memory before any layer changes state, so a
  // failure leaves them all released.
  std::vector<size_t> starting;
  std::vector<std::shared_ptr<device::Buffer>> fulls;
  for (size_t layer : layers) {
    LayerGather& s = layers_[layer];
    if (s.residency != Residency::kReleased || s.gathered_params.empty()) continue;
    int64_t full_elements = 0;
    for (size_t p : s.gathered_params) full_elements += storage_.padded(p);
    // Every byte is overwritten by the unpacking (shard padding included).
    // Freed in the comm stream's order: on a GPU the model may still read
    // it when the layer is released, and the comm stream waits for that
    // (Engine::after_model_work).
    DSCORE_ASSIGN_OR_RETURN(device::Buffer full,
                            allocate_scratch(ctx_.device, ctx_.stream, full_elements, md,
                                             MemoryUse::kBuffers, "gathered parameters"));
    fulls.push_back(std::make_shared<device::Buffer>(std::move(full)));
    starting.push_back(layer);
  }
  if (starting.empty()) return Status::Ok();
  for (size_t i = 0; i < starting.size(); ++i) {  // before a ticket may come
    LayerGather& s = layers_[starting[i]];
    s.full = fulls[i];
    s.residency = Residency::kInFlight;
    live_elements_ += s.numel;
  }
  // Allgathers of whole layers in trace order, each closed once it holds
  // kAllgatherElements: the model starts on a layer once its own allgather
  // is done, not the whole prefetch's, while small layers still share one.
  // A layer whose secondary pieces are current (hpZ) is gathered from them,
  // in allgathers of its own kind.
  const auto from_secondary = [&](size_t layer) { return layers_[layer].secondary_valid; };
  for (size_t first = 0; first < starting.size();) {
    size_t end = first;
    int64_t elements = 0;
    const bool secondary = from_secondary(starting[first]);
    while (end < starting.size() && elements < kAllgatherElements &&
           from_secondary(starting[end]) == secondary)
      elements += layers_[starting[end++]].shard_elements * world_;
    const std::vector<size_t> group(starting.begin() + first, starting.begin() + end);
    const std::vector<std::shared_ptr<device::Buffer>> buffers(fulls.begin() + first,
                                                               fulls.begin() + end);
    std::vector<size_t> params;  // in layer order
    std::vector<char*> dest;
    for (size_t i = 0; i < group.size(); ++i) {
      int64_t param_start = 0;
      for (size_t p : layers_[group[i]].gathered_params) {
        params.push_back(p);
        dest.push_back(element_at(buffers[i]->data(), md, param_start));
        param_start += storage_.padded(p);
      }
    }
    // By their buffers: a layer released and gathered again before this
    // allgather was submitted has another.
    auto submitted = [this, group, buffers](const device::EventPtr& ticket) {
      for (size_t i = 0; i < group.size(); ++i) {
        LayerGather& s = layers_[group[i]];
        if (s.full != buffers[i] || s.ticket) continue;
        s.ticket = ticket;
        s.gather = 0;
      }
    };
    Result<SwappedGathers::Id> gather =
        submit_allgather(params, dest, buffers, std::move(submitted), secondary);
    if (!gather.ok()) {
      for (size_t i = first; i < starting.size(); ++i) free_gathered(starting[i]);
      return gather.status();
    }
    for (size_t layer : group)
      if (!layers_[layer].ticket) layers_[layer].gather = *gather;
    first = end;
  }
  return advance_queued();
}

Status ShardedGathers::ensure_gathered(size_t layer, device::Stream* views_on) {
  LayerGather& s = layers_[layer];
  if (s.gathered_params.empty()) return Status::Ok();
  if (s.residency == Residency::kReleased) DSCORE_RETURN_IF_ERROR(start_gathers({layer}));
  if (s.gather != 0) DSCORE_RETURN_IF_ERROR(swapped_->complete(s.gather));
  if (s.ticket) {
    // The gather: the model's stream waits for it, or the host does. Ready
    // only in a stream's order, it stays the ticket for a later acquire
    // that needs it ready on the host.
    DSCORE_RETURN_IF_ERROR(order_views_after(s.ticket, views_on));
    if (views_on == nullptr) s.ticket.reset();
    s.residency = Residency::kAvailable;
  }
  point_param_views(layer);
  return Status::Ok();
}

void ShardedGathers::point_param_views(size_t layer) {
  LayerGather& s = layers_[layer];
  char* base = static_cast<char*>(s.full->data());
  const auto es = static_cast<int64_t>(sdk::dtype_size(ctx_.model_dtype()));
  int64_t offset = 0;
  for (size_t p : s.gathered_params) {
    storage_.param_view(p).data = base + offset * es;
    offset += storage_.padded(p);
  }
}

Result<std::vector<size_t>> ShardedGathers::prefetch_from(size_t position) {
  const config::ZeroConfig& z = *ctx_.zero;
  std::vector<size_t> group, backward;
  if (!trace_.valid() || z.prefetch_bucket_size <= 0) return backward;
  // Allgathers for the released layers of the next prefetch_bucket_size
  // elements of the trace, within the live limit. Events before
  // prefetched_until_ already have their layer gathered or on the way (a
  // release moves it back: free_gathered).
  int64_t live = live_elements_;
  size_t i = std::max(position, prefetched_until_);
  for (; i < trace_.size() && trace_.elements_between(position, i) < z.prefetch_bucket_size; ++i) {
    const size_t layer = trace_.event(i).layer;
    LayerGather& s = layers_[layer];
    // Upcoming backward passes, whose gradient buffers can be prepared off
    // the compute thread.
    if (trace_.event(i).mode == DSCORE_ACQUIRE_BACKWARD &&
        std::find(backward.begin(), backward.end(), layer) == backward.end())
      backward.push_back(layer);
    if (s.residency != Residency::kReleased || s.gathered_params.empty()) continue;
    if (std::find(group.begin(), group.end(), layer) != group.end()) continue;
    if (live + s.numel > z.max_live_parameters) break;
    live += s.numel;
    group.push_back(layer);
  }
  prefetched_until_ = i;
  DSCORE_RETURN_IF_ERROR(start_gathers(group));
  return backward;
}

bool ShardedGathers::reused_soon(size_t layer) const {
  if (!trace_.valid()) return false;
  const size_t next = trace_.next_use(layers_[layer].last_event);
  if (next == AcquireTrace::kNever || next < position_) return false;
  return trace_.elements_between(position_, next) <= ctx_.zero->max_reuse_distance;
}

void ShardedGathers::free_gathered(size_t layer) {
  LayerGather& s = layers_[layer];
  if (s.residency == Residency::kReleased) return;
  if (s.gather != 0) (void)swapped_->complete(s.gather);  // a failure is swapped_'s to report
  s.gather = 0;
  if (s.residency == Residency::kInFlight) (void)device::wait_for(s.ticket);
  s.ticket.reset();
  s.full.reset();
  s.residency = Residency::kReleased;
  live_elements_ -= s.numel;
  // Its next use needs a prefetch again.
  if (trace_.valid() && s.last_event < trace_.size()) {
    const size_t next = trace_.next_use(s.last_event);
    if (next != AcquireTrace::kNever && next >= position_)
      prefetched_until_ = std::min(prefetched_until_, next);
  }
}

// ------------------------------------------------------------ micro-steps

void ShardedGathers::begin_micro_step() {
  position_ = 0;
  prefetched_until_ = 0;
}

Result<std::vector<size_t>> ShardedGathers::acquire(size_t layer, dscore_acquire_mode mode,
                                                    device::Stream* views_on) {
  trace_.observe(position_, layer, mode);
  DSCORE_RETURN_IF_ERROR(advance_queued());
  LayerGather& s = layers_[layer];
  s.last_event = position_;
  s.mode = mode;
  position_ += 1;
  DSCORE_RETURN_IF_ERROR(ensure_gathered(layer, views_on));
  s.acquired += 1;
  return prefetch_from(position_);
}

Status ShardedGathers::release(size_t layer) {
  LayerGather& s = layers_[layer];
  s.acquired -= 1;
  if (s.mode == DSCORE_ACQUIRE_FORWARD) keep_secondary(layer);
  if (s.acquired == 0 && !reused_soon(layer)) free_gathered(layer);
  return advance_queued();
}

void ShardedGathers::end_micro_step() {
  if (!trace_.recording()) return;
  std::vector<int64_t> layer_elements;
  for (const LayerGather& s : layers_) layer_elements.push_back(s.numel);
  trace_.finish(layer_elements);
}

// ------------------------------------------------------------- the update

Status ShardedGathers::after_update() {
  for (size_t l = 0; l < layers_.size(); ++l) {
    free_gathered(l);
    layers_[l].secondary_valid = false;
  }
  return gather_persistent();
}

Status ShardedGathers::gather_persistent() {
  std::vector<size_t> params;
  std::vector<char*> dest;
  for (size_t p = 0; p < persistent_full_.size(); ++p) {
    if (!storage_.persistent(p)) continue;
    params.push_back(p);
    dest.push_back(static_cast<char*>(persistent_full_[p].data()));
  }
  if (params.empty()) return Status::Ok();
  DSCORE_ASSIGN_OR_RETURN(SwappedGathers::Id gather,
                          submit_allgather(params, dest, {}, [](const device::EventPtr&) {}));
  if (gather != 0) DSCORE_RETURN_IF_ERROR(swapped_->complete(gather));
  return ctx_.stream->synchronize();
}

}  // namespace dscore::zero
