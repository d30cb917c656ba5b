#include "core/zero/flat_zero.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "core/base/strings.h"
#include "core/zero/precision.h"
#include "core/zero/reduction.h"

namespace dscore::zero {
namespace {

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

CountedBuffer allocate(int64_t elements, dscore_dtype dtype, const std::string& tag) {
  CountedBuffer b =
      make_counted_buffer(static_cast<size_t>(std::max<int64_t>(elements, 1)) * sdk::dtype_size(dtype),
                          DSCORE_MEMORY_HOST, tag);
  if (!b) throw std::bad_alloc();
  fill_zero(b.get(), dtype, elements);
  return b;
}

}  // namespace

FlatZero::FlatZero(const ZeroContext& context, int stage)
    : ctx_(context), stage_(stage), rank_(context.comm->rank()), world_(context.comm->world_size()) {
  partition_ = make_flat_partition(ctx_.layout->total_numel(), world_);
  owned_begin_ = stage_ == 0 ? 0 : partition_.begin(rank_);
  owned_end_ = stage_ == 0 ? partition_.padded_numel : partition_.end(rank_);
  const auto& params = ctx_.layout->params();
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t a = std::max(params[i].offset, owned_begin_);
    const int64_t b = std::min(params[i].offset + params[i].numel, owned_end_);
    if (a < b) segments_.push_back({i, a - owned_begin_, b - a, a - params[i].offset});
  }
  bucket_capacity_ = std::clamp<int64_t>(ctx_.config->zero.reduce_bucket_size, 1, partition_.padded_numel);
}

char* FlatZero::at(void* base, dscore_dtype dtype, int64_t index) const {
  return static_cast<char*>(base) + index * static_cast<int64_t>(sdk::dtype_size(dtype));
}

Status FlatZero::initialise(const Model& model) {
  const dscore_dtype md = ctx_.model_dtype, gd = ctx_.grad_dtype;
  const int64_t padded = partition_.padded_numel, owned = owned_numel();
  params_ = allocate(padded, md, std::string("parameters ") + sdk::dtype_name(md));
  if (md != DSCORE_DTYPE_F32) master_ = allocate(owned, DSCORE_DTYPE_F32, "master weights fp32");
  if (stage_ <= 1) grads_full_ = allocate(padded, gd, std::string("gradients ") + sdk::dtype_name(gd));
  // Stage 1 reduces in place into its own slice of the full gradients.
  if (stage_ == 2) grad_owned_ = allocate(owned, gd, "gradient partition");
  if (stage_ == 2) {
    const int count = ctx_.config->zero.overlap_comm ? 2 : 1;
    for (int i = 0; i < count; ++i) buckets_[i].memory = allocate(bucket_capacity_, gd, "gradient bucket");
  }
  // Each rank initialises only what it owns; init_param is a function of
  // (seed, parameter, element), so every world size gets the same model.
  const auto& params = ctx_.layout->params();
  float* master = owned_master();
  for (const OwnedSegment& s : segments_) {
    const ParamEntry& p = params[s.param];
    const int64_t offset_in_param = owned_begin_ + s.offset - p.offset;
    DSCORE_RETURN_IF_ERROR(model.init_param(s.param, offset_in_param, s.numel, master + s.offset));
    if (md != DSCORE_DTYPE_F32)
      convert(master + s.offset, DSCORE_DTYPE_F32, at(params_.get(), md, owned_begin_ + s.offset), md,
              s.numel);
  }
  build_views();
  layer_ready_.assign(ctx_.layout->layer_count(), 0);
  layer_bucket_.assign(ctx_.layout->layer_count(), -1);
  return stage_ == 0 ? Status::Ok() : after_update();
}

void FlatZero::build_views() {
  const auto& params = ctx_.layout->params();
  for (const ParamEntry& p : params) {
    param_views_.push_back(view_of(at(params_.get(), ctx_.model_dtype, p.offset), ctx_.model_dtype, p));
    void* grad = stage_ <= 1 ? at(grads_full_.get(), ctx_.grad_dtype, p.offset) : nullptr;
    grad_views_.push_back(view_of(grad, ctx_.grad_dtype, p));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    param_ptrs_.push_back(&param_views_[i]);
    grad_ptrs_.push_back(&grad_views_[i]);
  }
}

float* FlatZero::owned_master() {
  return ctx_.model_dtype == DSCORE_DTYPE_F32
             ? reinterpret_cast<float*>(at(params_.get(), DSCORE_DTYPE_F32, owned_begin_))
             : static_cast<float*>(master_.get());
}

void* FlatZero::owned_grads() {
  return stage_ <= 1 ? at(grads_full_.get(), ctx_.grad_dtype, owned_begin_) : grad_owned_.get();
}

void* FlatZero::owned_params16() {
  return ctx_.model_dtype == DSCORE_DTYPE_F32 ? nullptr
                                              : at(params_.get(), ctx_.model_dtype, owned_begin_);
}

std::pair<int64_t, int64_t> FlatZero::norm_range() const {
  // Stage 0 holds every gradient; it counts only its own partition's share
  // so the partial sums of all ranks cover each element once, exactly as
  // stages 1/2 split them.
  if (stage_ == 0) return {partition_.begin(rank_), partition_.end(rank_)};
  return {0, owned_numel()};
}

// ------------------------------------------------------------ micro-steps

Status FlatZero::set_gradient_reduction(bool reduce) {
  if (stage_ != 0) return ZeroStrategy::set_gradient_reduction(reduce);
  reduce_ = reduce;
  return Status::Ok();
}

void FlatZero::begin_micro_step(bool boundary) {
  boundary_ = boundary;
  std::fill(layer_ready_.begin(), layer_ready_.end(), 0);
  std::fill(layer_bucket_.begin(), layer_bucket_.end(), -1);
  lowest_ready_layer_ = layer_ready_.size();
  grid_next_hi_ = partition_.padded_numel;
  bucket_open_ = false;
  oversized_.clear();
}

Status FlatZero::acquire(size_t layer, dscore_acquire_mode mode, dscore_layer_views* out) {
  const size_t first = ctx_.layout->layer_first(layer);
  out->count = ctx_.layout->layer_end(layer) - first;
  out->params = param_ptrs_.data() + first;
  out->grads = nullptr;
  if (mode == DSCORE_ACQUIRE_BACKWARD) {
    if (stage_ == 2 && layer_bucket_[layer] == -1) DSCORE_RETURN_IF_ERROR(place_in_bucket(layer));
    out->grads = grad_ptrs_.data() + first;
  }
  return Status::Ok();
}

Status FlatZero::release(size_t) { return Status::Ok(); }  // parameters stay resident

void FlatZero::note_layer_ready(size_t layer) {
  layer_ready_[layer] = 1;
  while (lowest_ready_layer_ > 0 && layer_ready_[lowest_ready_layer_ - 1]) --lowest_ready_layer_;
}

Status FlatZero::grads_ready(size_t layer) {
  if (layer_ready_[layer]) return Status::Ok();
  note_layer_ready(layer);
  if (stage_ <= 1) {
    if (boundary_ && reduce_ && ctx_.config->zero.overlap_comm) submit_ready_grid_buckets(false);
    return Status::Ok();
  }
  const int b = layer_bucket_[layer];
  if (b >= 0) {
    buckets_[b].pending -= 1;
    submit_bucket_if_complete(b);
  } else if (b <= -2) {
    Oversized& o = oversized_[static_cast<size_t>(-2 - b)];
    if (--o.pending == 0) submit_owner_reduction(static_cast<char*>(o.memory.get()), o.lo, o.lo, o.hi);
  }
  return Status::Ok();
}

Status FlatZero::end_micro_step() {
  if (stage_ <= 1) {
    if (!boundary_ || !reduce_) return Status::Ok();  // gradients stay local
    submit_ready_grid_buckets(/*all=*/true);
    return ctx_.stream->synchronize();
  }
  if (bucket_open_) seal_current_bucket();
  bucket_open_ = false;
  for (size_t l = 0; l < layer_bucket_.size(); ++l) {
    if (layer_bucket_[l] != -1 && !layer_ready_[l])
      return invalid_argument("the model lent gradients for layer " + std::to_string(l) +
                              " but never called grads_ready for it");
  }
  Status status = ctx_.stream->synchronize();
  oversized_.clear();
  return status;
}

// Stages 0/1 at the boundary: a fixed grid of buckets from the top of the
// flat space down; a bucket goes once every layer above its start is ready.
void FlatZero::submit_ready_grid_buckets(bool all) {
  const auto& params = ctx_.layout->params();
  const int64_t floor =
      all ? 0
          : (lowest_ready_layer_ >= ctx_.layout->layer_count()
                 ? ctx_.layout->total_numel()  // only the padding above the last layer
                 : params[ctx_.layout->layer_first(lowest_ready_layer_)].offset);
  while (grid_next_hi_ > 0) {
    const int64_t hi = grid_next_hi_, lo = std::max<int64_t>(0, hi - bucket_capacity_);
    if (lo < floor) break;
    grid_next_hi_ = lo;
    ctx_.stream->submit([this, lo, hi] {
      const Reduction r = plan_reduction(*ctx_.config, world_);
      void* data = at(grads_full_.get(), ctx_.grad_dtype, lo);
      scale_in_place(data, ctx_.grad_dtype, hi - lo, r.pre_factor);
      if (stage_ == 0) {
        comm::CommBuffer buffer{data, ctx_.grad_dtype, hi - lo};
        DSCORE_RETURN_IF_ERROR(ctx_.comm->allreduce(buffer, buffer, r.op));
        scale_in_place(data, ctx_.grad_dtype, hi - lo, r.post_factor);
        return Status::Ok();
      }
      for (const OwnedPiece& piece : split_by_owner(partition_, lo, hi)) {
        const int64_t n = piece.end - piece.begin;
        comm::CommBuffer send{at(grads_full_.get(), ctx_.grad_dtype, piece.begin), ctx_.grad_dtype, n};
        comm::CommBuffer recv;
        if (piece.rank == rank_) recv = send;  // the owner's slice, reduced in place
        DSCORE_RETURN_IF_ERROR(ctx_.comm->reduce(send, recv, r.op, piece.rank));
        if (piece.rank == rank_) scale_in_place(recv.data, ctx_.grad_dtype, n, r.post_factor);
      }
      return Status::Ok();
    });
  }
}

// ----------------------------------------------------------- stage 2 buckets

Status FlatZero::place_in_bucket(size_t layer) {
  const auto& params = ctx_.layout->params();
  const size_t first = ctx_.layout->layer_first(layer), end = ctx_.layout->layer_end(layer);
  const int64_t s = params[first].offset, e = params[end - 1].offset + params[end - 1].numel;
  const dscore_dtype gd = ctx_.grad_dtype;
  if (e - s > bucket_capacity_) {
    Oversized o;
    o.memory = allocate(e - s, gd, "gradient bucket");
    o.lo = s;
    o.hi = e;
    char* base = static_cast<char*>(o.memory.get());
    for (size_t p = first; p < end; ++p)
      grad_views_[p].data = base + (params[p].offset - s) * static_cast<int64_t>(sdk::dtype_size(gd));
    layer_bucket_[layer] = -2 - static_cast<int>(oversized_.size());
    oversized_.push_back(std::move(o));
    return Status::Ok();
  }
  Bucket* bucket = &buckets_[current_bucket_];
  if (!bucket_open_ || bucket->lo != e || bucket->hi - s > bucket_capacity_) {
    // A bucket whose layers are not all ready (a model that comes back to a
    // layer later, e.g. a tied embedding) moves out; sealing it would let
    // its memory be reused before it is reduced.
    if (bucket_open_ && bucket->pending > 0) detach_current_bucket();
    if (bucket_open_) seal_current_bucket();
    const int count = ctx_.config->zero.overlap_comm ? 2 : 1;
    current_bucket_ = bucket_open_ ? (current_bucket_ + 1) % count : current_bucket_;
    bucket = &buckets_[current_bucket_];
    DSCORE_RETURN_IF_ERROR(ctx_.stream->wait(bucket->ticket));  // its memory is free again
    bucket->ticket.reset();
    bucket->hi = e;
    bucket->lo = e;
    bucket->pending = 0;
    bucket->sealed = false;
    bucket_open_ = true;
  }
  // The bucket's memory is zero here: fresh, or zeroed by its last
  // reduction task, which finished before the wait above.
  const int64_t window = bucket->hi - bucket_capacity_;  // flat index of memory[0]
  char* base = static_cast<char*>(bucket->memory.get());
  const size_t es = sdk::dtype_size(gd);
  for (size_t p = first; p < end; ++p) grad_views_[p].data = base + (params[p].offset - window) * static_cast<int64_t>(es);
  bucket->lo = s;
  bucket->pending += 1;
  layer_bucket_[layer] = current_bucket_;
  return Status::Ok();
}

void FlatZero::detach_current_bucket() {
  Bucket& b = buckets_[current_bucket_];
  const dscore_dtype gd = ctx_.grad_dtype;
  const int64_t es = static_cast<int64_t>(sdk::dtype_size(gd));
  char* base = static_cast<char*>(b.memory.get()) + (b.lo - (b.hi - bucket_capacity_)) * es;
  Oversized o;
  o.memory = allocate(b.hi - b.lo, gd, "gradient bucket");
  o.lo = b.lo;
  o.hi = b.hi;
  o.pending = b.pending;
  char* moved = static_cast<char*>(o.memory.get());
  std::memcpy(moved, base, static_cast<size_t>((b.hi - b.lo) * es));
  std::memset(base, 0, static_cast<size_t>((b.hi - b.lo) * es));  // bucket memory is zero when free
  const auto& params = ctx_.layout->params();
  const int index = -2 - static_cast<int>(oversized_.size());
  for (size_t l = 0; l < layer_bucket_.size(); ++l) {
    const size_t first = ctx_.layout->layer_first(l);
    if (layer_bucket_[l] != current_bucket_ || params[first].offset < b.lo || params[first].offset >= b.hi) continue;
    for (size_t p = first; p < ctx_.layout->layer_end(l); ++p)
      grad_views_[p].data = moved + (params[p].offset - b.lo) * es;
    layer_bucket_[l] = index;
  }
  oversized_.push_back(std::move(o));
  b.pending = 0;
  b.lo = b.hi;
  bucket_open_ = false;
}

void FlatZero::seal_current_bucket() {
  buckets_[current_bucket_].sealed = true;
  submit_bucket_if_complete(current_bucket_);
}

void FlatZero::submit_bucket_if_complete(int index) {
  Bucket& b = buckets_[index];
  if (!b.sealed || b.pending > 0 || b.ticket) return;
  b.ticket = submit_owner_reduction(static_cast<char*>(b.memory.get()), b.hi - bucket_capacity_, b.lo, b.hi);
  b.sealed = false;
}

comm::CommStream::Ticket FlatZero::submit_owner_reduction(char* memory, int64_t window, int64_t lo,
                                                          int64_t hi) {
  return ctx_.stream->submit([this, memory, window, lo, hi] {
    const Reduction r = plan_reduction(*ctx_.config, world_);
    const dscore_dtype gd = ctx_.grad_dtype;
    const int64_t es = static_cast<int64_t>(sdk::dtype_size(gd));
    scale_in_place(memory + (lo - window) * es, gd, hi - lo, r.pre_factor);
    for (const OwnedPiece& piece : split_by_owner(partition_, lo, hi)) {
      const int64_t n = piece.end - piece.begin;
      comm::CommBuffer send{memory + (piece.begin - window) * es, gd, n};
      comm::CommBuffer recv;
      if (piece.rank == rank_) recv = send;  // reduced in place, then added to the partition
      DSCORE_RETURN_IF_ERROR(ctx_.comm->reduce(send, recv, r.op, piece.rank));
      if (piece.rank == rank_) {
        scale_in_place(send.data, gd, n, r.post_factor);
        accumulate(at(grad_owned_.get(), gd, piece.begin - owned_begin_), send.data, gd, n);
      }
    }
    // Clean for the next layers placed here, off the compute thread.
    fill_zero(memory + (lo - window) * es, gd, hi - lo);
    return Status::Ok();
  });
}

// ------------------------------------------------------------- the update

Status FlatZero::after_update() {
  if (stage_ == 0) return Status::Ok();  // every rank updated everything
  const dscore_dtype md = ctx_.model_dtype;
  comm::CommBuffer send{at(params_.get(), md, owned_begin_), md, partition_.partition_size};
  comm::CommBuffer recv{params_.get(), md, partition_.padded_numel};
  return ctx_.stream->run([&] { return ctx_.comm->allgather(send, recv); });
}

void FlatZero::zero_grads() {
  if (stage_ <= 1) fill_zero(grads_full_.get(), ctx_.grad_dtype, partition_.padded_numel);
  if (stage_ == 2) fill_zero(grad_owned_.get(), ctx_.grad_dtype, owned_numel());
}

Status FlatZero::gather_master(std::vector<float>* out) {
  const int64_t numel = ctx_.layout->total_numel();
  if (ctx_.model_dtype == DSCORE_DTYPE_F32 || stage_ == 0) {
    const float* full = ctx_.model_dtype == DSCORE_DTYPE_F32 ? static_cast<const float*>(params_.get())
                                                             : static_cast<const float*>(master_.get());
    out->assign(full, full + numel);
    return Status::Ok();
  }
  std::vector<float> full(static_cast<size_t>(partition_.padded_numel));
  comm::CommBuffer send{master_.get(), DSCORE_DTYPE_F32, partition_.partition_size};
  comm::CommBuffer recv{full.data(), DSCORE_DTYPE_F32, partition_.padded_numel};
  DSCORE_RETURN_IF_ERROR(ctx_.stream->run([&] { return ctx_.comm->allgather(send, recv); }));
  out->assign(full.begin(), full.begin() + numel);
  return Status::Ok();
}


std::vector<OwnedSegment> FlatZero::checkpoint_segments() const {
  if (stage_ != 0) return segments_;
  // Owned space is the flat space here: clip to this rank's partition.
  std::vector<OwnedSegment> mine;
  const int64_t lo = partition_.begin(rank_), hi = partition_.end(rank_);
  for (const OwnedSegment& s : segments_) {
    const int64_t a = std::max(s.offset, lo), b = std::min(s.offset + s.numel, hi);
    if (a < b) mine.push_back({s.param, a, b - a, s.element + (a - s.offset)});
  }
  return mine;
}

std::vector<ParamRun> FlatZero::checkpoint_params() {
  std::vector<ParamRun> runs;
  if (rank_ != 0) return runs;
  const auto& params = ctx_.layout->params();
  for (size_t i = 0; i < params.size(); ++i)
    runs.push_back({i, 0, params[i].numel, at(params_.get(), ctx_.model_dtype, params[i].offset)});
  return runs;
}

}  // namespace dscore::zero
