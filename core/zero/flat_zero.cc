#include "core/zero/flat_zero.h"

#include <algorithm>

#include "core/tensor/host_buffer.h"
#include "core/zero/grid_reduction.h"
#include "core/zero/ipg_buckets.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {
namespace {

std::unique_ptr<GradientReduction> reduction_for(int stage, const ZeroContext& context,
                                                 FlatStorage& storage) {
  switch (stage) {
    case 0:
      return std::make_unique<AllreduceGrid>(context, storage);
    case 1:
      return std::make_unique<OwnerReduceGrid>(context, storage);
    default:
      return std::make_unique<IpgBuckets>(context, storage);
  }
}

}  // namespace

FlatZero::FlatZero(const ZeroContext& context, int stage)
    : ctx_(context),
      storage_(*context.layout, context.model_dtype(), context.grad_dtype(), context.comm->rank(),
               context.comm->world_size(),
               stage == 0 ? Ownership::kReplicated : Ownership::kPartitioned,
               context.master_elsewhere()),
      reduction_(reduction_for(stage, ctx_, storage_)) {}

Status FlatZero::initialise(const Model& model) {
  DSCORE_RETURN_IF_ERROR(storage_.allocate(ctx_.device));
  DSCORE_RETURN_IF_ERROR(reduction_->allocate());
  // Each rank initialises only what it owns.
  DSCORE_RETURN_IF_ERROR(storage_.initialise_owned(model, ctx_.device, ctx_.stream));
  ready_.reset(ctx_.layout->layer_count());
  return storage_.replicated() ? Status::Ok() : after_update();
}

Status FlatZero::set_gradient_reduction(bool reduce) {
  if (!reduction_->can_skip_reduction()) return ZeroStrategy::set_gradient_reduction(reduce);
  reduction_->set_reduce(reduce);
  return Status::Ok();
}

void FlatZero::begin_micro_step(bool boundary) {
  ready_.reset(ctx_.layout->layer_count());
  reduction_->begin_micro_step(boundary);
}

Status FlatZero::acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                         dscore_layer_views* out) {
  const size_t first = ctx_.layout->layer_first(layer);
  out->count = ctx_.layout->layer_end(layer) - first;
  out->params = storage_.param_ptrs(first);
  out->grads = nullptr;
  if (mode == DSCORE_ACQUIRE_BACKWARD) {
    DSCORE_RETURN_IF_ERROR(reduction_->lend(layer, views_on));
    out->grads = storage_.grad_ptrs(first);
  }
  return Status::Ok();
}

Status FlatZero::grads_ready(size_t layer) {
  if (!ready_.mark(layer)) return Status::Ok();
  return reduction_->layer_ready(layer, ready_);
}

Status FlatZero::end_micro_step() { return reduction_->end_micro_step(ready_); }

GradientShare FlatZero::gradient_share() {
  // Stage 0 holds every gradient on every rank; each counts its stage-1 partition.
  auto [begin, end] = storage_.norm_range();
  // norm_range is in flat order when replicated, else from the owned start.
  const int64_t origin = storage_.replicated() ? 0 : storage_.owned_begin();
  begin = std::min(std::max(begin, ctx_.norm_skipped - origin), end);
  GradientShare share{tensor::element_at(owned_grads(), ctx_.grad_dtype(), begin), end - begin, {}};
  if (ctx_.norm_excluded.empty()) return share;
  // The share's elements outside the excluded ranges, relative to `begin`.
  int64_t at = begin;
  for (const auto& [first, last] : ctx_.norm_excluded) {
    const int64_t lo = std::clamp(first - origin, begin, end);
    const int64_t hi = std::clamp(last - origin, begin, end);
    if (lo > at) share.counted.emplace_back(at - begin, lo - begin);
    at = std::max(at, hi);
  }
  if (at < end) share.counted.emplace_back(at - begin, end - begin);
  // Everything excluded: one empty range, so nothing is counted.
  if (share.counted.empty()) share.counted.emplace_back(0, 0);
  return share;
}

Status FlatZero::after_update() {
  if (storage_.replicated()) return Status::Ok();  // every rank updated everything
  const dscore_dtype md = ctx_.model_dtype();
  const FlatPartition& partition = storage_.partition();
  const comm::CommBuffer send =
      device_buffer(ctx_.device, tensor::element_at(storage_.params(), md, storage_.owned_begin()),
                    md, partition.partition_size);
  const comm::CommBuffer recv =
      device_buffer(ctx_.device, storage_.params(), md, partition.padded_numel);
  return ctx_.stream->run([&] { return ctx_.comm->allgather(send, recv); });
}

Status FlatZero::gather_master(std::vector<float>* out) {
  const int64_t numel = ctx_.layout->total_numel();
  if (const float* full = storage_.full_master()) {
    out->resize(static_cast<size_t>(numel));
    return download(ctx_.device, ctx_.stream, out->data(), full,
                    static_cast<size_t>(numel) * sizeof(float));
  }
  return gather_from(
      device_buffer(ctx_.device, storage_.owned_master(), DSCORE_DTYPE_F32, storage_.owned_numel()),
      out);
}

Status FlatZero::gather_owned(const float* owned, std::vector<float>* out) {
  return gather_from({const_cast<float*>(owned), DSCORE_DTYPE_F32, storage_.owned_numel()}, out);
}

Status FlatZero::gather_from(const comm::CommBuffer& owned, std::vector<float>* out) {
  const int64_t numel = ctx_.layout->total_numel();
  if (storage_.replicated()) {  // every rank owns everything
    out->resize(static_cast<size_t>(numel));
    return download(ctx_.device, ctx_.stream, out->data(), owned.data,
                    static_cast<size_t>(numel) * sizeof(float));
  }
  // Gathered straight into `out` (staged through the device where the
  // backend needs it), padding included, then trimmed.
  const FlatPartition& partition = storage_.partition();
  out->resize(static_cast<size_t>(partition.padded_numel));
  comm::CommBuffer send = owned;
  send.numel = partition.partition_size;
  comm::CommBuffer recv{out->data(), DSCORE_DTYPE_F32, partition.padded_numel};
  DSCORE_RETURN_IF_ERROR(ctx_.stream->run([&] { return ctx_.comm->allgather(send, recv); }));
  out->resize(static_cast<size_t>(numel));
  return Status::Ok();
}

std::vector<ParamRun> FlatZero::checkpoint_params() {
  if (ctx_.comm->rank() != 0) return {};
  return replica_params();
}

std::vector<ParamRun> FlatZero::replica_params() {
  std::vector<ParamRun> runs;
  const auto& params = ctx_.layout->params();
  for (size_t i = 0; i < params.size(); ++i)
    runs.push_back(
        buffer_run(ctx_, i, 0, params[i].numel,
                   tensor::element_at(storage_.params(), ctx_.model_dtype(), params[i].offset)));
  return runs;
}

}  // namespace dscore::zero
