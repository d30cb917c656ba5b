#include "core/zero/sharded_zero.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/plan.h"
#include "core/zero/rank_chunks.h"
#include "core/zero/reduction.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

using tensor::element_at;
using tensor::Fill;

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

ShardedZero::ShardedZero(const ZeroContext& context)
    : ctx_(context), rank_(context.comm->rank()), world_(context.comm->world_size()) {
  const auto& params = ctx_.layout->params();
  std::vector<int64_t> numels;
  for (const ParamEntry& p : params) numels.push_back(p.numel);
  shards_ = make_sharded_layout(numels, world_);
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t real = shards_.params[i].real_elements(rank_);
    if (real > 0)
      segments_.push_back(
          {i, shards_.params[i].local_offset, real, shards_.params[i].first_element(rank_)});
  }
  // Persistence (docs/deepspeed-reference.md#stage-3-layout): small params, while the running total
  // of persistent elements stays within the model threshold.
  const config::ZeroConfig& z = *ctx_.zero;
  persistent_.assign(params.size(), 0);
  int64_t persistent_total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel <= z.param_persistence_threshold &&
        persistent_total + params[i].numel <= z.model_persistence_threshold) {
      persistent_[i] = 1;
      persistent_total += params[i].numel;
    }
  }
  layers_.resize(ctx_.layout->layer_count());
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerState& s = layers_[l];
    for (size_t p = ctx_.layout->layer_first(l); p < ctx_.layout->layer_end(l); ++p) {
      s.all_shard_elements += shards_.params[p].shard_size;
      if (persistent_[p]) continue;
      s.gathered_params.push_back(p);
      s.shard_elements += shards_.params[p].shard_size;
      s.numel += params[p].numel;
    }
  }
}

int64_t ShardedZero::padded(size_t param) const {
  return shards_.params[param].shard_size * world_;
}

float* ShardedZero::owned_master() {
  if (ctx_.master_elsewhere() && ctx_.model_dtype() != DSCORE_DTYPE_F32) return nullptr;
  return ctx_.model_dtype() == DSCORE_DTYPE_F32 ? static_cast<float*>(param_part_.data())
                                                : static_cast<float*>(master_.data());
}

void* ShardedZero::owned_params16() {
  return ctx_.model_dtype() == DSCORE_DTYPE_F32 ? nullptr
                                                : param_part_.data();  // null when swapped
}

Status ShardedZero::store_params16(int64_t begin, int64_t count, const void* values) {
  if (!param_swap_) return ZeroStrategy::store_params16(begin, count, values);
  return param_swap_->store(begin, count, values);
}

Status ShardedZero::initialise(const Model& model) {
  const dscore_dtype md = ctx_.model_dtype();
  const int64_t local = shards_.local_numel;
  if (ctx_.param_swapper != nullptr) {
    if (md == DSCORE_DTYPE_F32)
      return invalid_argument(
          "parameters on NVMe need a 16-bit model (bf16 or fp16): an fp32 model's parameters are "
          "its master weights");
    const bool staged = ctx_.device != nullptr && !ctx_.device->memory_is_host();
    DSCORE_ASSIGN_OR_RETURN(param_swap_,
                            ParamSwap::create(ctx_.param_swapper, ctx_.param_swap_folder, local, md,
                                              ctx_.placement->param_offload.max_in_cpu,
                                              staged ? ctx_.device : nullptr));
    const int64_t on_disk = local - param_swap_->resident_elements();
    if (staged) {
      const config::OffloadConfig& offload = ctx_.placement->param_offload;
      const int64_t ring =
          on_disk > 0 ? param_swap_ring_elements(offload.buffer_count, offload.buffer_size, on_disk)
                      : 0;
      DSCORE_ASSIGN_OR_RETURN(
          swapped_,
          SwappedGathers::create(*param_swap_, *ctx_.device, *ctx_.stream, ctx_.comm_target, md,
                                 static_cast<size_t>(ring) * sdk::dtype_size(md)));
    }
  } else {
    const bool pinned = ctx_.placement->params_pinned_on_host();
    DSCORE_ASSIGN_OR_RETURN(
        param_part_,
        allocate_buffer(ctx_.device, local, md, MemoryUse::kParameters,
                        std::string("parameters ") + sdk::dtype_name(md), tensor::Fill::kZero,
                        pinned ? device::Placement::kPinned : device::Placement::kDevice));
    if (pinned)
      log_info("rank " + std::to_string(rank_) + ": parameters " +
               format_bytes(static_cast<uint64_t>(param_part_.bytes())) +
               " in pinned host memory (offload_param cpu), copied to the device by each gather");
  }
  if (md != DSCORE_DTYPE_F32 && !ctx_.master_elsewhere()) {
    DSCORE_ASSIGN_OR_RETURN(master_, allocate_buffer(ctx_.device, local, DSCORE_DTYPE_F32,
                                                     MemoryUse::kMaster, "master weights fp32"));
  }
  DSCORE_ASSIGN_OR_RETURN(grad_part_, allocate_buffer(ctx_.device, local, ctx_.grad_dtype(),
                                                      MemoryUse::kGradients, "gradient partition"));
  float* master = owned_master();
  if (param_swap_) {
    DSCORE_RETURN_IF_ERROR(initialise_swapped(model));
  } else {
    for (const OwnedSegment& s : segments_) {
      const ParamShard& shard = shards_.params[s.param];
      DSCORE_RETURN_IF_ERROR(init_owned(model, s.param, shard.first_element(rank_), s.numel,
                                        master == nullptr ? nullptr : master + s.offset,
                                        element_at(param_part_.data(), md, s.offset), md,
                                        ctx_.device, ctx_.stream));
    }
  }
  const auto& params = ctx_.layout->params();
  persistent_full_.resize(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    if (!persistent_[p]) continue;
    DSCORE_ASSIGN_OR_RETURN(
        persistent_full_[p],
        allocate_buffer(ctx_.device, padded(p), md, MemoryUse::kBuffers, "persistent parameters"));
  }
  for (const ParamEntry& p : params) {
    param_views_.push_back(param_view(nullptr, md, p));
    grad_views_.push_back(param_view(nullptr, ctx_.grad_dtype(), p));
    place_view(&param_views_.back(), ctx_.device);
    place_view(&grad_views_.back(), ctx_.device);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    param_ptrs_.push_back(&param_views_[i]);
    grad_ptrs_.push_back(&grad_views_[i]);
    if (persistent_[i]) param_views_[i].data = persistent_full_[i].data();
  }
  return gather_persistent();
}

Status ShardedZero::initialise_swapped(const Model& model) {
  // Piece by piece of the local space (whole granules), front to back, so
  // the file gets every granule once.
  const dscore_dtype md = ctx_.model_dtype();
  const int64_t local = shards_.local_numel;
  const int64_t piece = 1 << 22;  // a multiple of kTileGranularity
  float* master = owned_master();
  DSCORE_ASSIGN_OR_RETURN(
      CountedBuffer staging,
      tensor::allocate_elements(std::min(piece, std::max<int64_t>(local, 1)), md,
                                MemoryUse::kBuffers, "nvme parameter staging"));
  for (int64_t a = 0; a < local; a += piece) {
    const int64_t b = std::min(a + piece, local);
    tensor::fill_zero(staging.get(), md, b - a);  // shard padding
    for (const OwnedSegment& s : segments_) {
      const int64_t lo = std::max(s.offset, a), hi = std::min(s.offset + s.numel, b);
      if (lo >= hi) continue;
      const ParamShard& shard = shards_.params[s.param];
      DSCORE_RETURN_IF_ERROR(
          init_owned(model, s.param, shard.first_element(rank_) + (lo - s.offset), hi - lo,
                     master == nullptr ? nullptr : master + lo,
                     element_at(staging.get(), md, lo - a), md, ctx_.device, ctx_.stream));
    }
    DSCORE_RETURN_IF_ERROR(param_swap_->store(a, b - a, staging.get()));
  }
  std::string how;
  if (swapped_ && param_swap_->resident_elements() > 0)
    how += "; the resident part is pinned and copied to the device from there";
  if (swapped_ && swapped_->ring_bytes() > 0)
    how += "; gathers read the rest through a " + format_bytes(swapped_->ring_bytes()) +
           " pinned staging ring (offload_param buffer_count x buffer_size)";
  log_info("rank " + std::to_string(rank_) + ": parameters " + param_swap_->describe() + how);
  return Status::Ok();
}

Status ShardedZero::for_each_local_run(
    const std::vector<size_t>& params,
    const std::function<Status(int64_t begin, int64_t at, int64_t count)>& run) const {
  int64_t at = 0;
  for (size_t i = 0; i < params.size();) {
    // A run of params whose shards follow each other in the local space.
    const ParamShard& first = shards_.params[params[i]];
    int64_t count = first.shard_size;
    size_t j = i + 1;
    while (j < params.size() &&
           shards_.params[params[j]].local_offset == first.local_offset + count) {
      count += shards_.params[params[j]].shard_size;
      ++j;
    }
    DSCORE_RETURN_IF_ERROR(run(first.local_offset, at, count));
    at += count;
    i = j;
  }
  return Status::Ok();
}

Status ShardedZero::pack_shards(const std::vector<size_t>& params, char* packed) {
  const dscore_dtype md = ctx_.model_dtype();
  return for_each_local_run(params, [&](int64_t begin, int64_t at, int64_t count) {
    if (param_swap_) return param_swap_->load(begin, count, element_at(packed, md, at));
    device::ops::copy(ctx_.comm_target, element_at(packed, md, at),
                      element_at(param_part_.data(), md, begin), md, count);
    return Status::Ok();
  });
}

// --------------------------------------------------------------- gathering

Result<SwappedGathers::Id> ShardedZero::submit_allgather(
    const std::vector<size_t>& params, const std::vector<char*>& dest,
    const std::vector<std::shared_ptr<device::Buffer>>& keep,
    std::function<void(const device::EventPtr&)> submitted) {
  std::shared_ptr<device::Buffer> staged;  // the shards, packed by swapped_'s copies
  if (swapped_) {
    const dscore_dtype md = ctx_.model_dtype();
    int64_t shard_elements = 0;
    for (size_t p : params) shard_elements += shards_.params[p].shard_size;
    // Scratch in the comm stream's order, held by the tasks that use it.
    DSCORE_ASSIGN_OR_RETURN(device::Buffer buffer,
                            allocate_scratch(ctx_.device, ctx_.stream, shard_elements, md,
                                             MemoryUse::kBuffers, "gathered parameters"));
    staged = std::make_shared<device::Buffer>(std::move(buffer));
    DSCORE_RETURN_IF_ERROR(
        for_each_local_run(params, [&](int64_t begin, int64_t at, int64_t count) {
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

Status ShardedZero::submit_queued_gathers() {
  return swapped_ ? swapped_->complete_all() : Status::Ok();
}

Status ShardedZero::advance_queued_gathers() {
  return swapped_ ? swapped_->advance() : Status::Ok();
}

Status ShardedZero::allgather_shards(const std::vector<size_t>& params,
                                     const std::vector<char*>& dest, const device::Buffer* staged) {
  // Pack this rank's shards, one allgather, then unpack each rank's chunk:
  // rank r's shard of params[i] goes to element r * shard_size of dest[i].
  const dscore_dtype md = ctx_.model_dtype();
  std::vector<ShardedRun> runs;
  for (size_t i = 0; i < params.size(); ++i)
    runs.push_back({dest[i], shards_.params[params[i]].shard_size});
  const int64_t shard_elements = chunk_elements(runs);
  // Dropped at the end of this comm-stream task, maybe before the copies
  // queued on it: scratch, freed in the stream's order.
  device::Buffer packed;
  if (staged == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(packed, allocate_scratch(ctx_.device, ctx_.stream, shard_elements, md,
                                                     MemoryUse::kBuffers, "gathered parameters"));
    DSCORE_RETURN_IF_ERROR(pack_shards(params, static_cast<char*>(packed.data())));
  }
  DSCORE_ASSIGN_OR_RETURN(device::Buffer gathered,
                          allocate_scratch(ctx_.device, ctx_.stream, shard_elements * world_, md,
                                           MemoryUse::kBuffers, "gathered parameters"));
  char* pk = static_cast<char*>(staged != nullptr ? staged->data() : packed.data());
  DSCORE_RETURN_IF_ERROR(ctx_.comm->allgather(
      device_buffer(ctx_.device, pk, md, shard_elements),
      device_buffer(ctx_.device, gathered.data(), md, shard_elements * world_)));
  unpack_rank_chunks(ctx_.comm_target, static_cast<const char*>(gathered.data()), runs, world_, md);
  return Status::Ok();
}

Status ShardedZero::start_gathers(const std::vector<size_t>& layers) {
  const dscore_dtype md = ctx_.model_dtype();
  // Allocate every layer's memory before any layer changes state, so a
  // failure leaves them all released.
  std::vector<size_t> starting;
  std::vector<std::shared_ptr<device::Buffer>> fulls;
  for (size_t layer : layers) {
    LayerState& s = layers_[layer];
    if (s.residency != Residency::kReleased || s.gathered_params.empty()) continue;
    int64_t full_elements = 0;
    for (size_t p : s.gathered_params) full_elements += padded(p);
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
    LayerState& s = layers_[starting[i]];
    s.full = fulls[i];
    s.residency = Residency::kInFlight;
    live_elements_ += s.numel;
  }
  // Allgathers of whole layers in trace order, each closed once it holds
  // kAllgatherElements: the model starts on a layer once its own allgather
  // is done, not the whole prefetch's, while small layers still share one.
  for (size_t first = 0; first < starting.size();) {
    size_t end = first;
    int64_t elements = 0;
    while (end < starting.size() && elements < kAllgatherElements)
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
        param_start += padded(p);
      }
    }
    // By their buffers: a layer released and gathered again before this
    // allgather was submitted has another.
    auto submitted = [this, group, buffers](const device::EventPtr& ticket) {
      for (size_t i = 0; i < group.size(); ++i) {
        LayerState& s = layers_[group[i]];
        if (s.full != buffers[i] || s.ticket) continue;
        s.ticket = ticket;
        s.gather = 0;
      }
    };
    Result<SwappedGathers::Id> gather =
        submit_allgather(params, dest, buffers, std::move(submitted));
    if (!gather.ok()) {
      for (size_t i = first; i < starting.size(); ++i) free_gathered(starting[i]);
      return gather.status();
    }
    for (size_t layer : group)
      if (!layers_[layer].ticket) layers_[layer].gather = *gather;
    first = end;
  }
  return advance_queued_gathers();
}

Status ShardedZero::ensure_gathered(size_t layer, device::Stream* views_on) {
  LayerState& s = layers_[layer];
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

void ShardedZero::point_param_views(size_t layer) {
  LayerState& s = layers_[layer];
  char* base = static_cast<char*>(s.full->data());
  int64_t offset = 0;
  for (size_t p : s.gathered_params) {
    param_views_[p].data =
        base + offset * static_cast<int64_t>(sdk::dtype_size(ctx_.model_dtype()));
    offset += padded(p);
  }
}

void ShardedZero::finish_trace() {
  std::vector<int64_t> layer_elements;
  for (const LayerState& s : layers_) layer_elements.push_back(s.numel);
  trace_.finish(layer_elements);
}

int64_t ShardedZero::padded_layer_elements(size_t layer) const {
  int64_t elements = 0;
  for (size_t p = ctx_.layout->layer_first(layer); p < ctx_.layout->layer_end(layer); ++p)
    elements += padded(p);
  return elements;
}

void ShardedZero::prepare_grads(const std::vector<size_t>& layers) {
  if (layers.empty()) return;
  // Allocated here, zeroed by a comm-stream task off the compute thread.
  // The last user of a bucket is a comm-stream task (flush_gradients):
  // scratch of that stream. A failed allocation leaves the entry empty:
  // take_grads allocates it again and reports the Status there.
  auto prepared = std::make_shared<std::vector<device::Buffer>>();
  std::vector<std::pair<void*, int64_t>> to_zero;
  for (size_t l : layers) {
    const int64_t elements = padded_layer_elements(l);
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
    LayerState& s = layers_[layers[i]];
    s.grads_ticket = ticket;
    s.prepared = prepared;
    s.prepared_index = i;
  }
}

Result<std::shared_ptr<device::Buffer>> ShardedZero::take_grads(size_t layer,
                                                                device::Stream* views_on) {
  LayerState& s = layers_[layer];
  if (s.grads_ticket) {
    DSCORE_RETURN_IF_ERROR(order_views_after(s.grads_ticket, views_on));
    s.grads_ticket.reset();
    device::Buffer buffer = std::move((*s.prepared)[s.prepared_index]);
    s.prepared.reset();
    if (buffer) return std::make_shared<device::Buffer>(std::move(buffer));
  }
  const int64_t elements = padded_layer_elements(layer);
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

Status ShardedZero::prefetch_from(size_t position) {
  const config::ZeroConfig& z = *ctx_.zero;
  if (!trace_.valid() || z.prefetch_bucket_size <= 0) return Status::Ok();
  // Allgathers for the released layers of the next prefetch_bucket_size
  // elements of the trace, within the live limit. Events before
  // prefetched_until_ already have their layer gathered or on the way (a
  // release moves it back: free_gathered).
  std::vector<size_t> group, grads_for;
  int64_t live = live_elements_;
  size_t i = std::max(position, prefetched_until_);
  for (; i < trace_.size() && trace_.elements_between(position, i) < z.prefetch_bucket_size; ++i) {
    const size_t layer = trace_.event(i).layer;
    LayerState& s = layers_[layer];
    // Zeroed gradient buffers for upcoming backward passes, prepared off
    // the compute thread (the model adds into them).
    if (trace_.event(i).mode == DSCORE_ACQUIRE_BACKWARD && !s.grads && !s.grads_ticket &&
        std::find(grads_for.begin(), grads_for.end(), layer) == grads_for.end())
      grads_for.push_back(layer);
    if (s.residency != Residency::kReleased || s.gathered_params.empty()) continue;
    if (std::find(group.begin(), group.end(), layer) != group.end()) continue;
    if (live + s.numel > z.max_live_parameters) break;
    live += s.numel;
    group.push_back(layer);
  }
  prefetched_until_ = i;
  DSCORE_RETURN_IF_ERROR(start_gathers(group));
  prepare_grads(grads_for);
  return Status::Ok();
}

bool ShardedZero::reused_soon(size_t layer) const {
  if (!trace_.valid()) return false;
  const size_t next = trace_.next_use(layers_[layer].last_event);
  if (next == AcquireTrace::kNever || next < position_) return false;
  return trace_.elements_between(position_, next) <= ctx_.zero->max_reuse_distance;
}

void ShardedZero::free_gathered(size_t layer) {
  LayerState& s = layers_[layer];
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

void ShardedZero::begin_micro_step(bool boundary) {
  boundary_ = boundary;
  position_ = 0;
  prefetched_until_ = 0;
}

Status ShardedZero::acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                            dscore_layer_views* out) {
  trace_.observe(position_, layer, mode);
  DSCORE_RETURN_IF_ERROR(advance_queued_gathers());
  LayerState& s = layers_[layer];
  s.last_event = position_;
  position_ += 1;
  DSCORE_RETURN_IF_ERROR(ensure_gathered(layer, views_on));
  s.acquired += 1;
  DSCORE_RETURN_IF_ERROR(prefetch_from(position_));
  const size_t first = ctx_.layout->layer_first(layer);
  out->count = ctx_.layout->layer_end(layer) - first;
  out->params = param_ptrs_.data() + first;
  out->grads = nullptr;
  if (mode == DSCORE_ACQUIRE_BACKWARD) {
    if (!s.grads) {
      DSCORE_ASSIGN_OR_RETURN(s.grads, take_grads(layer, views_on));
      char* base = static_cast<char*>(s.grads->data());
      int64_t offset = 0;
      for (size_t p = first; p < ctx_.layout->layer_end(layer); ++p) {
        grad_views_[p].data =
            base + offset * static_cast<int64_t>(sdk::dtype_size(ctx_.grad_dtype()));
        offset += padded(p);
      }
    }
    out->grads = grad_ptrs_.data() + first;
  }
  return Status::Ok();
}

Status ShardedZero::release(size_t layer) {
  LayerState& s = layers_[layer];
  s.acquired -= 1;
  if (s.acquired == 0 && !reused_soon(layer)) free_gathered(layer);
  return advance_queued_gathers();
}

Status ShardedZero::grads_ready(size_t layer) {
  LayerState& s = layers_[layer];
  if (!s.grads) return Status::Ok();
  pending_grad_elements_ += s.all_shard_elements * world_;
  pending_grads_.push_back({layer, std::move(s.grads)});
  if (pending_grad_elements_ >= gradient_flush_elements(*ctx_.zero))
    DSCORE_RETURN_IF_ERROR(flush_gradients());
  return advance_queued_gathers();
}

Status ShardedZero::reduce_grads(const std::vector<PendingGrads>& group, bool clean,
                                 const Reduction& r) {
  const dscore_dtype gd = ctx_.grad_dtype();
  const int64_t es = static_cast<int64_t>(sdk::dtype_size(gd));
  // Interleave per rank: chunk r = every param's r-th shard, layer after
  // layer (docs/deepspeed-reference.md#stage-3-layout reduce_scatter_coalesced), then one
  // reduce-scatter. The layers come in ascending order, so this rank's
  // shards usually follow each other in the partition as in the chunk.
  std::vector<ShardedRun> runs;
  bool back_to_back = true;
  int64_t first_offset = -1, next_offset = -1;
  for (const PendingGrads& g : group) {
    char* full = static_cast<char*>(g.grads->data());
    for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
      const ParamShard& sh = shards_.params[p];
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
  DSCORE_RETURN_IF_ERROR(
      ctx_.comm->reduce_scatter(device_buffer(ctx_.device, send.data(), gd, chunk * world_),
                                device_buffer(ctx_.device, reduced, gd, chunk), r.op));
  device::ops::scale_in_place(on, reduced, gd, chunk, r.post_factor);
  if (into_partition) return Status::Ok();
  int64_t in_chunk = 0;
  for (const PendingGrads& g : group) {
    for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
      const ParamShard& sh = shards_.params[p];
      device::ops::accumulate(on, element_at(grad_part_.data(), gd, sh.local_offset),
                              static_cast<const char*>(reduced) + in_chunk * es, gd, sh.shard_size);
      in_chunk += sh.shard_size;
    }
  }
  return Status::Ok();
}

Status ShardedZero::flush_gradients() {
  if (pending_grads_.empty()) return Status::Ok();
  DSCORE_RETURN_IF_ERROR(submit_queued_gathers());
  std::vector<PendingGrads> group = std::move(pending_grads_);
  pending_grads_.clear();
  pending_grad_elements_ = 0;
  std::sort(group.begin(), group.end(),
            [](const PendingGrads& a, const PendingGrads& b) { return a.layer < b.layer; });
  // One reduce-scatter: gradient_flush_elements keeps it within a bucket
  // and a layer. Clean: no shard of these layers in the gradient partition
  // was written since zero_grads.
  bool clean = true;
  for (const PendingGrads& g : group) {
    LayerState& s = layers_[g.layer];
    clean = clean && s.partition_clean;
    s.partition_clean = false;
  }
  device::EventPtr done = ctx_.stream->submit([this, group, clean]() mutable {
    DSCORE_RETURN_IF_ERROR(reduce_grads(group, clean, ctx_.reduction));
    group.clear();  // the full gradients, freed in this task
    return Status::Ok();
  });
  // The boundary's reduce-scatter is the last write of these layers' shards.
  if (boundary_ && ctx_.reduced_gradients != nullptr) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const PendingGrads& g : group)
      for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
        const ParamShard& sh = shards_.params[p];
        if (!ranges.empty() && ranges.back().second == sh.local_offset)
          ranges.back().second += sh.shard_size;
        else
          ranges.emplace_back(sh.local_offset, sh.local_offset + sh.shard_size);
      }
    ctx_.reduced_gradients->owned_grads_final(ranges, done);
  }
  return Status::Ok();
}

Status ShardedZero::end_micro_step() {
  Status status = flush_gradients();
  if (status.ok()) status = submit_queued_gathers();  // prefetched but not acquired
  const Status synced = ctx_.stream->synchronize();
  if (status.ok()) status = synced;
  if (trace_.recording()) finish_trace();
  return status;
}

// ------------------------------------------------------------- the update

Status ShardedZero::after_update() {
  // Gathered copies hold the old values: drop them; refresh the persistent.
  for (size_t l = 0; l < layers_.size(); ++l) free_gathered(l);
  return gather_persistent();
}

Status ShardedZero::gather_persistent() {
  std::vector<size_t> params;
  std::vector<char*> dest;
  for (size_t p = 0; p < persistent_.size(); ++p) {
    if (!persistent_[p]) continue;
    params.push_back(p);
    dest.push_back(static_cast<char*>(persistent_full_[p].data()));
  }
  if (params.empty()) return Status::Ok();
  DSCORE_ASSIGN_OR_RETURN(SwappedGathers::Id gather,
                          submit_allgather(params, dest, {}, [](const device::EventPtr&) {}));
  if (gather != 0) DSCORE_RETURN_IF_ERROR(swapped_->complete(gather));
  return ctx_.stream->synchronize();
}

GradientShare ShardedZero::gradient_share() {
  // The whole local part: the ranks' shards are disjoint and cover every parameter.
  return {grad_part_.data(), shards_.local_numel};
}

void ShardedZero::zero_grads(device::ops::Target target) {
  device::ops::fill_zero(target, grad_part_.data(), ctx_.grad_dtype(), shards_.local_numel);
  for (LayerState& s : layers_) s.partition_clean = true;
}

Status ShardedZero::gather_master(std::vector<float>* out) {
  return gather_from(
      device_buffer(ctx_.device, owned_master(), DSCORE_DTYPE_F32, shards_.local_numel), out);
}

Status ShardedZero::gather_owned(const float* owned, std::vector<float>* out) {
  return gather_from({const_cast<float*>(owned), DSCORE_DTYPE_F32, shards_.local_numel}, out);
}

Status ShardedZero::gather_from(const comm::CommBuffer& owned, std::vector<float>* out) {
  const int64_t local = shards_.local_numel;
  // Into host memory (staged through the device where the backend needs it).
  std::vector<float> all(static_cast<size_t>(local * world_));
  DSCORE_RETURN_IF_ERROR(ctx_.stream->run([&] {
    return ctx_.comm->allgather(owned, {all.data(), DSCORE_DTYPE_F32, local * world_});
  }));
  out->clear();
  for (size_t p = 0; p < shards_.params.size(); ++p) {
    const ParamShard& sh = shards_.params[p];
    for (int r = 0; r < world_; ++r) {
      const int64_t real = sh.real_elements(r);
      const float* src = all.data() + r * local + sh.local_offset;
      out->insert(out->end(), src, src + real);
    }
  }
  return Status::Ok();
}

std::vector<ParamRun> ShardedZero::checkpoint_params() {
  std::vector<ParamRun> runs;
  for (const OwnedSegment& s : segments_) {
    if (!param_swap_) {
      runs.push_back(buffer_run(ctx_, s.param, s.element, s.numel,
                                element_at(param_part_.data(), ctx_.model_dtype(), s.offset)));
      continue;
    }
    ParamSwap* swap = param_swap_.get();
    const int64_t at = s.offset;
    runs.push_back(
        {s.param, s.element, s.numel, nullptr, [swap, at](int64_t first, int64_t count, void* dst) {
           return swap->load(at + first, count, dst);
         }});
  }
  return runs;
}

}  // namespace dscore::zero
