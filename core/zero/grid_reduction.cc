#include "core/zero/grid_reduction.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <string>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

GridReduction::GridReduction(const ZeroContext& context, FlatStorage& storage)
    : ctx_(context),
      storage_(storage),
      bucket_capacity_(bucket_elements(context, storage.partition())),
      every_micro_step_(context.gradient_accumulation_steps > 1 && context.comm->world_size() > 1) {
}

char* GridReduction::grads_at(int64_t flat_index) {
  return tensor::element_at(grads_.data(), ctx_.grad_dtype(), flat_index);
}

Status GridReduction::allocate() {
  const dscore_dtype gd = ctx_.grad_dtype();
  DSCORE_ASSIGN_OR_RETURN(grads_, allocate_buffer(ctx_.device, storage_.partition().padded_numel,
                                                  gd, MemoryUse::kGradients,
                                                  std::string("gradients ") + sdk::dtype_name(gd)));
  storage_.point_grads(0, storage_.layout().params().size(), grads_.data(), 0);
  if (every_micro_step_) {
    DSCORE_ASSIGN_OR_RETURN(
        accumulated_,
        allocate_buffer(ctx_.device, storage_.owned_numel(), gd, MemoryUse::kGradients,
                        std::string("accumulated gradients ") + sdk::dtype_name(gd)));
  }
  return Status::Ok();
}

// Stage 1 reduces in place into its own slice of the full gradients.
void* GridReduction::owned_grads() {
  return reduces_every_micro_step() ? accumulated_.data() : grads_at(storage_.owned_begin());
}

void GridReduction::zero_grads(device::ops::Target target) {
  device::ops::fill_zero(target, grads_.data(), ctx_.grad_dtype(),
                         storage_.partition().padded_numel);
  if (every_micro_step_)
    device::ops::fill_zero(target, accumulated_.data(), ctx_.grad_dtype(), storage_.owned_numel());
}

void GridReduction::begin_micro_step(bool boundary) {
  boundary_ = boundary;
  next_hi_ = storage_.partition().padded_numel;
}

bool GridReduction::reduces_now() const {
  return reduce_ && (boundary_ || reduces_every_micro_step());
}

Status GridReduction::layer_ready(size_t, const ReadyLayers& ready) {
  if (reduces_now() && ctx_.zero->overlap_comm) submit_ready(false, ready);
  return Status::Ok();
}

Status GridReduction::end_micro_step(const ReadyLayers& ready) {
  if (!reduces_now()) return Status::Ok();  // gradients stay local
  submit_ready(/*all=*/true, ready);
  if (reduces_every_micro_step()) {
    // This micro-step's mean joins the sum; the model adds into zeros again.
    ctx_.stream->enqueue([this] {
      const dscore_dtype gd = ctx_.grad_dtype();
      device::ops::accumulate(ctx_.comm_target, accumulated_.data(),
                              grads_at(storage_.owned_begin()), gd, storage_.owned_numel());
      device::ops::fill_zero(ctx_.comm_target, grads_.data(), gd,
                             storage_.partition().padded_numel);
      return Status::Ok();
    });
    if (boundary_) report_owned_grads_final(ctx_, 0, storage_.owned_numel(), ctx_.stream->record());
  }
  return ctx_.stream->synchronize();
}

void GridReduction::submit_ready(bool all, const ReadyLayers& ready) {
  const ParamLayout& layout = storage_.layout();
  const int64_t floor = all ? 0
                            : (ready.lowest() >= layout.layer_count()
                                   ? layout.total_numel()  // only the padding above the last layer
                                   : layout.params()[layout.layer_first(ready.lowest())].offset);
  while (next_hi_ > 0) {
    const int64_t hi = next_hi_, lo = std::max<int64_t>(0, hi - bucket_capacity_);
    if (lo < floor) break;
    next_hi_ = lo;
    device::EventPtr done = ctx_.stream->submit([this, lo, hi] {
      const Reduction& r = ctx_.reduction;
      device::ops::scale_in_place(ctx_.comm_target, grads_at(lo), ctx_.grad_dtype(), hi - lo,
                                  r.pre_factor);
      return reduce_bucket(lo, hi, r);
    });
    // Reduced in place at the boundary: this rank's part of [lo, hi) is final.
    if (boundary_ && !reduces_every_micro_step()) {
      const int64_t begin = storage_.owned_begin(), end = begin + storage_.owned_numel();
      report_owned_grads_final(ctx_, std::max(lo, begin) - begin, std::min(hi, end) - begin, done);
    }
  }
}

Status AllreduceGrid::reduce_bucket(int64_t lo, int64_t hi, const Reduction& r) {
  void* data = grads_at(lo);
  const comm::CommBuffer buffer = device_buffer(ctx_.device, data, ctx_.grad_dtype(), hi - lo);
  DSCORE_RETURN_IF_ERROR(ctx_.comm->allreduce(buffer, buffer, r.op));
  device::ops::scale_in_place(ctx_.comm_target, data, ctx_.grad_dtype(), hi - lo, r.post_factor);
  return Status::Ok();
}

Status OwnerReduceGrid::reduce_bucket(int64_t lo, int64_t hi, const Reduction& r) {
  const int rank = storage_.rank();
  const std::vector<OwnedPiece> pieces = split_by_owner(storage_.partition(), lo, hi);
  // One reduce per owner, grouped (they may run together); the owner's
  // slice is read only after the group.
  DSCORE_RETURN_IF_ERROR(ctx_.comm->grouped([&] {
    for (const OwnedPiece& piece : pieces) {
      const comm::CommBuffer send = device_buffer(ctx_.device, grads_at(piece.begin),
                                                  ctx_.grad_dtype(), piece.end - piece.begin);
      comm::CommBuffer recv;
      if (piece.rank == rank) recv = send;  // the owner's slice, reduced in place
      DSCORE_RETURN_IF_ERROR(ctx_.comm->reduce(send, recv, r.op, piece.rank));
    }
    return Status::Ok();
  }));
  for (const OwnedPiece& piece : pieces)
    if (piece.rank == rank)
      device::ops::scale_in_place(ctx_.comm_target, grads_at(piece.begin), ctx_.grad_dtype(),
                                  piece.end - piece.begin, r.post_factor);
  return Status::Ok();
}

}  // namespace dscore::zero
