#include "core/zero/sharded_zero.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "core/base/logging.h"
#include "core/zero/precision.h"
#include "core/zero/reduction.h"

namespace dscore::zero {
namespace {

CountedBuffer allocate(int64_t elements, dscore_dtype dtype, const std::string& tag) {
  CountedBuffer b = make_counted_buffer(
      static_cast<size_t>(std::max<int64_t>(elements, 1)) * sdk::dtype_size(dtype), DSCORE_MEMORY_HOST, tag);
  if (!b) throw std::bad_alloc();
  fill_zero(b.get(), dtype, elements);
  return b;
}

dscore_tensor view_of(void* data, dscore_dtype dtype, const ParamEntry& p) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device_type = DSCORE_DEVICE_CPU;
  t.ndim = static_cast<int32_t>(p.shape.size());
  t.shape = p.shape.data();
  t.numel = p.numel;
  t.name = p.name.c_str();
  return t;
}

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
      segments_.push_back({i, shards_.params[i].local_offset, real, shards_.params[i].first_element(rank_)});
  }
  // Persistence (docs/deepspeed-reference.md#stage-3-layout): small params, while the running total
  // of persistent elements stays within the model threshold.
  const config::ZeroConfig& z = ctx_.config->zero;
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

char* ShardedZero::at(void* base, dscore_dtype dtype, int64_t index) const {
  return static_cast<char*>(base) + index * static_cast<int64_t>(sdk::dtype_size(dtype));
}

int64_t ShardedZero::padded(size_t param) const { return shards_.params[param].shard_size * world_; }

float* ShardedZero::owned_master() {
  return ctx_.model_dtype == DSCORE_DTYPE_F32 ? static_cast<float*>(param_part_.get())
                                              : static_cast<float*>(master_.get());
}

void* ShardedZero::owned_params16() {
  return ctx_.model_dtype == DSCORE_DTYPE_F32 ? nullptr : param_part_.get();
}

Status ShardedZero::initialise(const Model& model) {
  const dscore_dtype md = ctx_.model_dtype;
  const int64_t local = shards_.local_numel;
  param_part_ = allocate(local, md, std::string("parameters ") + sdk::dtype_name(md));
  if (md != DSCORE_DTYPE_F32) master_ = allocate(local, DSCORE_DTYPE_F32, "master weights fp32");
  grad_part_ = allocate(local, ctx_.grad_dtype, "gradient partition");
  float* master = owned_master();
  for (const OwnedSegment& s : segments_) {
    const ParamShard& shard = shards_.params[s.param];
    DSCORE_RETURN_IF_ERROR(model.init_param(s.param, shard.first_element(rank_), s.numel, master + s.offset));
    if (md != DSCORE_DTYPE_F32)
      convert(master + s.offset, DSCORE_DTYPE_F32, at(param_part_.get(), md, s.offset), md, s.numel);
  }
  const auto& params = ctx_.layout->params();
  persistent_full_.resize(params.size());
  for (size_t p = 0; p < params.size(); ++p)
    if (persistent_[p]) persistent_full_[p] = allocate(padded(p), md, "persistent parameters");
  for (const ParamEntry& p : params) {
    param_views_.push_back(view_of(nullptr, md, p));
    grad_views_.push_back(view_of(nullptr, ctx_.grad_dtype, p));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    param_ptrs_.push_back(&param_views_[i]);
    grad_ptrs_.push_back(&grad_views_[i]);
    if (persistent_[i]) param_views_[i].data = persistent_full_[i].get();
  }
  return gather_persistent();
}

// --------------------------------------------------------------- gathering

void ShardedZero::start_gathers(const std::vector<size_t>& layers) {
  const dscore_dtype md = ctx_.model_dtype;
  const size_t es = sdk::dtype_size(md);
  struct Target {
    std::shared_ptr<CountedBuffer> full;
    std::vector<size_t> params;
  };
  std::vector<Target> targets;
  int64_t shard_elements = 0;
  for (size_t layer : layers) {
    LayerState& s = layers_[layer];
    if (s.residency != Residency::kReleased || s.gathered_params.empty()) continue;
    int64_t full_elements = 0;
    for (size_t p : s.gathered_params) full_elements += padded(p);
    // Every byte is overwritten by the unpacking (shard padding included).
    s.full = std::make_shared<CountedBuffer>(make_counted_buffer(
        static_cast<size_t>(full_elements) * es, DSCORE_MEMORY_HOST, "gathered parameters"));
    if (!*s.full) throw std::bad_alloc();
    s.residency = Residency::kInFlight;
    live_elements_ += s.numel;
    shard_elements += s.shard_elements;
    targets.push_back({s.full, s.gathered_params});
  }
  if (targets.empty()) return;
  auto ticket = ctx_.stream->submit([this, targets, shard_elements, es, md] {
    // Pack this rank's shards of every layer, one allgather, then unpack
    // each rank's chunk into the full (padded) parameters.
    CountedBuffer packed = make_counted_buffer(static_cast<size_t>(shard_elements) * es, DSCORE_MEMORY_HOST,
                                               "gathered parameters");
    CountedBuffer gathered = make_counted_buffer(static_cast<size_t>(shard_elements * world_) * es,
                                                 DSCORE_MEMORY_HOST, "gathered parameters");
    if (!packed || !gathered) return Status(DSCORE_RESOURCE_EXHAUSTED, "zero-3: cannot allocate a gather buffer");
    char* pk = static_cast<char*>(packed.get());
    int64_t offset = 0;
    for (const Target& t : targets) {
      for (size_t p : t.params) {
        const ParamShard& sh = shards_.params[p];
        std::memcpy(pk + offset * static_cast<int64_t>(es), at(param_part_.get(), md, sh.local_offset),
                    static_cast<size_t>(sh.shard_size) * es);
        offset += sh.shard_size;
      }
    }
    DSCORE_RETURN_IF_ERROR(ctx_.comm->allgather({pk, md, shard_elements},
                                                {gathered.get(), md, shard_elements * world_}));
    const char* all = static_cast<const char*>(gathered.get());
    for (int r = 0; r < world_; ++r) {
      int64_t in_chunk = 0;
      for (const Target& t : targets) {
        char* out = static_cast<char*>(t.full->get());
        int64_t param_start = 0;
        for (size_t p : t.params) {
          const int64_t shard = shards_.params[p].shard_size;
          std::memcpy(out + (param_start + r * shard) * static_cast<int64_t>(es),
                      all + (r * shard_elements + in_chunk) * static_cast<int64_t>(es),
                      static_cast<size_t>(shard) * es);
          in_chunk += shard;
          param_start += shard * world_;
        }
      }
    }
    return Status::Ok();
  });
  for (size_t layer : layers)
    if (layers_[layer].residency == Residency::kInFlight && !layers_[layer].ticket) layers_[layer].ticket = ticket;
}

Status ShardedZero::ensure_gathered(size_t layer) {
  LayerState& s = layers_[layer];
  if (s.gathered_params.empty()) return Status::Ok();
  if (s.residency == Residency::kReleased) start_gathers({layer});
  if (s.residency == Residency::kInFlight) {
    DSCORE_RETURN_IF_ERROR(ctx_.stream->wait(s.ticket));
    s.ticket.reset();
    s.residency = Residency::kAvailable;
  }
  point_param_views(layer);
  return Status::Ok();
}

void ShardedZero::point_param_views(size_t layer) {
  LayerState& s = layers_[layer];
  char* base = static_cast<char*>(s.full->get());
  int64_t offset = 0;
  for (size_t p : s.gathered_params) {
    param_views_[p].data = base + offset * static_cast<int64_t>(sdk::dtype_size(ctx_.model_dtype));
    offset += padded(p);
  }
}

void ShardedZero::finish_trace() {
  // For each event, where its layer is used next, and the elements gathered
  // by the events before each index: reuse distances become subtractions.
  next_use_.assign(trace_.size(), kNever);
  std::vector<size_t> seen(layers_.size(), kNever);
  for (size_t i = trace_.size(); i-- > 0;) {
    next_use_[i] = seen[trace_[i].layer];
    seen[trace_[i].layer] = i;
  }
  elements_before_.assign(trace_.size() + 1, 0);
  for (size_t i = 0; i < trace_.size(); ++i)
    elements_before_[i + 1] = elements_before_[i] + layers_[trace_[i].layer].numel;
  recording_ = false;
  trace_valid_ = true;
}

int64_t ShardedZero::padded_layer_elements(size_t layer) const {
  int64_t elements = 0;
  for (size_t p = ctx_.layout->layer_first(layer); p < ctx_.layout->layer_end(layer); ++p) elements += padded(p);
  return elements;
}

void ShardedZero::prepare_grads(const std::vector<size_t>& layers) {
  if (layers.empty()) return;
  std::vector<int64_t> elements;
  for (size_t l : layers) elements.push_back(padded_layer_elements(l));
  auto prepared = std::make_shared<std::vector<CountedBuffer>>(layers.size());
  auto ticket = ctx_.stream->submit([this, elements, prepared] {
    for (size_t i = 0; i < elements.size(); ++i)
      (*prepared)[i] = allocate(elements[i], ctx_.grad_dtype, "gradient bucket");
    return Status::Ok();
  });
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerState& s = layers_[layers[i]];
    s.grads_ticket = ticket;
    s.prepared = prepared;
    s.prepared_index = i;
  }
}

Result<std::shared_ptr<CountedBuffer>> ShardedZero::take_grads(size_t layer) {
  LayerState& s = layers_[layer];
  if (s.grads_ticket) {
    DSCORE_RETURN_IF_ERROR(ctx_.stream->wait(s.grads_ticket));
    s.grads_ticket.reset();
    CountedBuffer buffer = std::move((*s.prepared)[s.prepared_index]);
    s.prepared.reset();
    if (buffer) return std::make_shared<CountedBuffer>(std::move(buffer));
  }
  return std::make_shared<CountedBuffer>(allocate(padded_layer_elements(layer), ctx_.grad_dtype, "gradient bucket"));
}

void ShardedZero::prefetch_from(size_t position) {
  const config::ZeroConfig& z = ctx_.config->zero;
  if (!trace_valid_ || z.prefetch_bucket_size <= 0) return;
  // One allgather for the released layers of the next prefetch_bucket_size
  // elements of the trace, within the live limit. Events before
  // prefetched_until_ already have their layer gathered or on the way (a
  // release moves it back: free_gathered).
  std::vector<size_t> group, grads_for;
  int64_t live = live_elements_;
  size_t i = std::max(position, prefetched_until_);
  for (; i < trace_.size() && elements_before_[i] - elements_before_[position] < z.prefetch_bucket_size; ++i) {
    const size_t layer = trace_[i].layer;
    LayerState& s = layers_[layer];
    // Zeroed gradient buffers for upcoming backward passes, prepared off
    // the compute thread (the model adds into them).
    if (trace_[i].mode == DSCORE_ACQUIRE_BACKWARD && !s.grads && !s.grads_ticket &&
        std::find(grads_for.begin(), grads_for.end(), layer) == grads_for.end())
      grads_for.push_back(layer);
    if (s.residency != Residency::kReleased || s.gathered_params.empty()) continue;
    if (std::find(group.begin(), group.end(), layer) != group.end()) continue;
    if (live + s.numel > z.max_live_parameters) break;
    live += s.numel;
    group.push_back(layer);
  }
  prefetched_until_ = i;
  start_gathers(group);
  prepare_grads(grads_for);
}

bool ShardedZero::reused_soon(size_t layer) const {
  if (!trace_valid_) return false;
  const size_t next = next_use_[layers_[layer].last_event];
  if (next == kNever || next < position_) return false;
  return elements_before_[next] - elements_before_[position_] <= ctx_.config->zero.max_reuse_distance;
}

void ShardedZero::free_gathered(size_t layer) {
  LayerState& s = layers_[layer];
  if (s.residency == Residency::kReleased) return;
  if (s.residency == Residency::kInFlight) (void)ctx_.stream->wait(s.ticket);
  s.ticket.reset();
  s.full.reset();
  s.residency = Residency::kReleased;
  live_elements_ -= s.numel;
  // Its next use needs a prefetch again.
  if (trace_valid_ && s.last_event < next_use_.size()) {
    const size_t next = next_use_[s.last_event];
    if (next != kNever && next >= position_) prefetched_until_ = std::min(prefetched_until_, next);
  }
}

// ------------------------------------------------------------ micro-steps

void ShardedZero::begin_micro_step(bool) {
  position_ = 0;
  prefetched_until_ = 0;
}

Status ShardedZero::acquire(size_t layer, dscore_acquire_mode mode, dscore_layer_views* out) {
  if (recording_) {
    trace_.push_back({layer, mode});
  } else if (trace_valid_ && (position_ >= trace_.size() || trace_[position_].layer != layer ||
                              trace_[position_].mode != mode)) {
    log_debug("zero-3: the model's acquire order changed; prefetching stops for this run");
    trace_valid_ = false;
  }
  LayerState& s = layers_[layer];
  s.last_event = position_;
  position_ += 1;
  DSCORE_RETURN_IF_ERROR(ensure_gathered(layer));
  s.acquired += 1;
  prefetch_from(position_);
  const size_t first = ctx_.layout->layer_first(layer);
  out->count = ctx_.layout->layer_end(layer) - first;
  out->params = param_ptrs_.data() + first;
  out->grads = nullptr;
  if (mode == DSCORE_ACQUIRE_BACKWARD) {
    if (!s.grads) {
      DSCORE_ASSIGN_OR_RETURN(s.grads, take_grads(layer));
      char* base = static_cast<char*>(s.grads->get());
      int64_t offset = 0;
      for (size_t p = first; p < ctx_.layout->layer_end(layer); ++p) {
        grad_views_[p].data = base + offset * static_cast<int64_t>(sdk::dtype_size(ctx_.grad_dtype));
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
  return Status::Ok();
}

Status ShardedZero::grads_ready(size_t layer) {
  LayerState& s = layers_[layer];
  if (!s.grads) return Status::Ok();
  pending_grad_elements_ += s.all_shard_elements * world_;
  pending_grads_.push_back({layer, std::move(s.grads)});
  if (pending_grad_elements_ >= ctx_.config->zero.reduce_bucket_size) flush_gradients();
  return Status::Ok();
}

void ShardedZero::flush_gradients() {
  if (pending_grads_.empty()) return;
  std::vector<PendingGrads> group = std::move(pending_grads_);
  pending_grads_.clear();
  pending_grad_elements_ = 0;
  ctx_.stream->submit([this, group] {
    const dscore_dtype gd = ctx_.grad_dtype;
    const int64_t es = static_cast<int64_t>(sdk::dtype_size(gd));
    const Reduction r = plan_reduction(*ctx_.config, world_);
    int64_t chunk = 0;
    for (const PendingGrads& g : group) chunk += layers_[g.layer].all_shard_elements;
    // Interleave per rank: chunk r = every param's r-th shard, layer after
    // layer (docs/deepspeed-reference.md#stage-3-layout reduce_scatter_coalesced), then one
    // reduce-scatter.
    CountedBuffer send = make_counted_buffer(static_cast<size_t>(chunk * world_ * es), DSCORE_MEMORY_HOST,
                                             "gradient bucket");
    CountedBuffer recv = make_counted_buffer(static_cast<size_t>(chunk * es), DSCORE_MEMORY_HOST, "gradient bucket");
    if (!send || !recv) return Status(DSCORE_RESOURCE_EXHAUSTED, "zero-3: cannot allocate a gradient bucket");
    char* out = static_cast<char*>(send.get());
    for (int rr = 0; rr < world_; ++rr) {
      int64_t in_chunk = 0;
      for (const PendingGrads& g : group) {
        const char* full = static_cast<const char*>(g.grads->get());
        int64_t param_start = 0;
        for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
          const int64_t shard = shards_.params[p].shard_size;
          std::memcpy(out + (rr * chunk + in_chunk) * es, full + (param_start + rr * shard) * es,
                      static_cast<size_t>(shard * es));
          in_chunk += shard;
          param_start += shard * world_;
        }
      }
    }
    scale_in_place(send.get(), gd, chunk * world_, r.pre_factor);
    DSCORE_RETURN_IF_ERROR(ctx_.comm->reduce_scatter({send.get(), gd, chunk * world_}, {recv.get(), gd, chunk}, r.op));
    scale_in_place(recv.get(), gd, chunk, r.post_factor);
    const char* reduced = static_cast<const char*>(recv.get());
    int64_t in_chunk = 0;
    for (const PendingGrads& g : group) {
      for (size_t p = ctx_.layout->layer_first(g.layer); p < ctx_.layout->layer_end(g.layer); ++p) {
        const ParamShard& sh = shards_.params[p];
        accumulate(at(grad_part_.get(), gd, sh.local_offset), reduced + in_chunk * es, gd, sh.shard_size);
        in_chunk += sh.shard_size;
      }
    }
    return Status::Ok();
  });
}

Status ShardedZero::end_micro_step() {
  flush_gradients();
  Status status = ctx_.stream->synchronize();
  if (recording_) finish_trace();
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
  int64_t shard_elements = 0;
  for (size_t p = 0; p < persistent_.size(); ++p) {
    if (!persistent_[p]) continue;
    params.push_back(p);
    shard_elements += shards_.params[p].shard_size;
  }
  if (params.empty()) return Status::Ok();
  const dscore_dtype md = ctx_.model_dtype;
  const size_t es = sdk::dtype_size(md);
  return ctx_.stream->run([&] {
    std::vector<char> packed(static_cast<size_t>(shard_elements) * es);
    std::vector<char> gathered(packed.size() * static_cast<size_t>(world_));
    int64_t offset = 0;
    for (size_t p : params) {
      const ParamShard& sh = shards_.params[p];
      std::memcpy(packed.data() + offset * es, at(param_part_.get(), md, sh.local_offset),
                  static_cast<size_t>(sh.shard_size) * es);
      offset += sh.shard_size;
    }
    DSCORE_RETURN_IF_ERROR(ctx_.comm->allgather({packed.data(), md, shard_elements},
                                                {gathered.data(), md, shard_elements * world_}));
    for (int r = 0; r < world_; ++r) {
      int64_t in_chunk = 0;
      for (size_t p : params) {
        const int64_t shard = shards_.params[p].shard_size;
        std::memcpy(static_cast<char*>(persistent_full_[p].get()) + r * shard * static_cast<int64_t>(es),
                    gathered.data() + (r * shard_elements + in_chunk) * static_cast<int64_t>(es),
                    static_cast<size_t>(shard) * es);
        in_chunk += shard;
      }
    }
    return Status::Ok();
  });
}

void ShardedZero::zero_grads() { fill_zero(grad_part_.get(), ctx_.grad_dtype, shards_.local_numel); }

Status ShardedZero::gather_master(std::vector<float>* out) {
  const int64_t local = shards_.local_numel;
  std::vector<float> all(static_cast<size_t>(local * world_));
  DSCORE_RETURN_IF_ERROR(ctx_.stream->run([&] {
    return ctx_.comm->allgather({owned_master(), DSCORE_DTYPE_F32, local},
                                {all.data(), DSCORE_DTYPE_F32, local * world_});
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
  for (const OwnedSegment& s : segments_)
    runs.push_back({s.param, s.element, s.numel, at(param_part_.get(), ctx_.model_dtype, s.offset)});
  return runs;
}

}  // namespace dscore::zero
