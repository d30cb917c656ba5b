#include "core/zero/sharded_zero.h"

#include "core/zero/zero_memory.h"

namespace dscore::zero {

ShardedZero::ShardedZero(const ZeroContext& context)
    : ctx_(context),
      storage_(context),
      gathers_(context, storage_),
      reduction_(context, storage_, gathers_) {}

Status ShardedZero::initialise(const Model& model) {
  DSCORE_RETURN_IF_ERROR(storage_.allocate());
  DSCORE_RETURN_IF_ERROR(reduction_.allocate());
  DSCORE_RETURN_IF_ERROR(storage_.initialise_owned(model));
  ready_.reset(ctx_.layout->layer_count());
  return gathers_.initialise();
}

Status ShardedZero::store_params16(int64_t begin, int64_t count, const void* values) {
  ParamSwap* swap = storage_.param_swap();
  if (swap == nullptr) return ZeroStrategy::store_params16(begin, count, values);
  return swap->store(begin, count, values);
}

GradientShare ShardedZero::gradient_share() {
  // The whole local part: the ranks' shards are disjoint and cover every parameter.
  GradientShare share{reduction_.owned_grads(), storage_.local_numel(), {}};
  if (ctx_.norm_excluded.empty()) return share;
  // Less the shards of the parameters in the excluded flat ranges (each
  // parameter's shard sits at its local_offset in the packed local part).
  const std::vector<ParamShard>& shards = storage_.shards().params;
  const auto excluded = [&](int64_t offset, int64_t numel) {
    for (const auto& [first, last] : ctx_.norm_excluded)
      if (offset >= first && offset + numel <= last) return true;
    return false;
  };
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    if (s.shard_size == 0 || excluded(ctx_.layout->params()[i].offset, s.numel)) continue;
    const int64_t lo = s.local_offset, hi = s.local_offset + s.shard_size;
    if (!share.counted.empty() && share.counted.back().second == lo)
      share.counted.back().second = hi;
    else
      share.counted.emplace_back(lo, hi);
  }
  if (share.counted.empty()) share.counted.emplace_back(0, 0);  // nothing counted
  return share;
}

void ShardedZero::begin_micro_step(bool boundary) {
  gathers_.begin_micro_step();
  reduction_.begin_micro_step(boundary);
}

Status ShardedZero::acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                            dscore_layer_views* out) {
  DSCORE_ASSIGN_OR_RETURN(const std::vector<size_t> backward,
                          gathers_.acquire(layer, mode, views_on));
  // Zeroed gradient buffers for the backward passes the prefetch sees
  // coming, prepared off the compute thread (the model adds into them).
  reduction_.prepare(backward);
  const size_t first = ctx_.layout->layer_first(layer);
  out->count = ctx_.layout->layer_end(layer) - first;
  out->params = storage_.param_ptrs(first);
  out->grads = nullptr;
  if (mode == DSCORE_ACQUIRE_BACKWARD) {
    DSCORE_RETURN_IF_ERROR(reduction_.lend(layer, views_on));
    out->grads = storage_.grad_ptrs(first);
  }
  return Status::Ok();
}

Status ShardedZero::release(size_t layer) { return gathers_.release(layer); }

Status ShardedZero::grads_ready(size_t layer) {
  if (!reduction_.lent(layer)) return Status::Ok();
  DSCORE_RETURN_IF_ERROR(reduction_.layer_ready(layer, ready_));
  return gathers_.advance_queued();
}

Status ShardedZero::end_micro_step() {
  Status status = reduction_.end_micro_step(ready_);
  if (status.ok()) status = gathers_.submit_queued();  // prefetched but not acquired
  const Status synced = ctx_.stream->synchronize();
  if (status.ok()) status = synced;
  gathers_.end_micro_step();
  return status;
}

Status ShardedZero::gather_master(std::vector<float>* out) {
  return gather_from(
      device_buffer(ctx_.device, storage_.owned_master(), DSCORE_DTYPE_F32, storage_.local_numel()),
      out);
}

Status ShardedZero::gather_owned(const float* owned, std::vector<float>* out) {
  return gather_from({const_cast<float*>(owned), DSCORE_DTYPE_F32, storage_.local_numel()}, out);
}

Status ShardedZero::gather_from(const comm::CommBuffer& owned, std::vector<float>* out) {
  const int64_t local = storage_.local_numel();
  const int world = ctx_.comm->world_size();
  // Into host memory (staged through the device where the backend needs it).
  std::vector<float> all(static_cast<size_t>(local * world));
  DSCORE_RETURN_IF_ERROR(ctx_.stream->run([&] {
    return ctx_.comm->allgather(owned, {all.data(), DSCORE_DTYPE_F32, local * world});
  }));
  out->clear();
  const ShardedLayout& shards = storage_.shards();
  for (size_t p = 0; p < shards.params.size(); ++p) {
    const ParamShard& sh = shards.params[p];
    for (int r = 0; r < world; ++r) {
      const int64_t real = sh.real_elements(r);
      const float* src = all.data() + r * local + sh.local_offset;
      out->insert(out->end(), src, src + real);
    }
  }
  return Status::Ok();
}

}  // namespace dscore::zero
