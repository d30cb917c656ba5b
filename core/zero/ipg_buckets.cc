#include "core/zero/ipg_buckets.h"

#include <algorithm>
#include <string>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/reduction.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

using tensor::element_at;

IpgBuckets::IpgBuckets(const ZeroContext& context, FlatStorage& storage)
    : ctx_(context),
      storage_(storage),
      capacity_(bucket_elements(context, storage.partition())),
      bucket_count_(context.zero->overlap_comm ? 2 : 1) {}

Status IpgBuckets::allocate() {
  const dscore_dtype gd = ctx_.grad_dtype();
  DSCORE_ASSIGN_OR_RETURN(owned_, allocate_buffer(ctx_.device, storage_.owned_numel(), gd,
                                                  MemoryUse::kGradients, "gradient partition"));
  for (size_t i = 0; i < bucket_count_; ++i) {
    DSCORE_ASSIGN_OR_RETURN(
        buckets_[i].memory,
        allocate_buffer(ctx_.device, capacity_, gd, MemoryUse::kBuffers, "gradient bucket"));
  }
  placement_.assign(storage_.layout().layer_count(), Placement{});
  return Status::Ok();
}

void IpgBuckets::zero_grads(device::ops::Target target) {
  device::ops::fill_zero(target, owned_.data(), ctx_.grad_dtype(), storage_.owned_numel());
}

void IpgBuckets::begin_micro_step(bool boundary) {
  boundary_ = boundary;
  std::fill(placement_.begin(), placement_.end(), Placement{});
  open_ = false;
  solos_.clear();
}

Status IpgBuckets::lend(size_t layer, device::Stream* views_on) {
  if (placement_[layer].kind != Placement::Kind::kNotLent)
    return Status::Ok();  // lent earlier this micro-step
  return place(layer, views_on);
}

Result<device::Buffer> IpgBuckets::solo_memory(int64_t elements, bool zero,
                                               device::Stream* views_on) {
  const dscore_dtype gd = ctx_.grad_dtype();
  DSCORE_ASSIGN_OR_RETURN(device::Buffer memory,
                          allocate_scratch(ctx_.device, ctx_.stream, elements, gd,
                                           MemoryUse::kBuffers, "gradient bucket"));
  void* data = memory.data();
  const device::EventPtr ready = zero ? ctx_.stream->submit([this, data, gd, elements] {
    device::ops::fill_zero(ctx_.comm_target, data, gd, elements);
    return Status::Ok();
  })
                                      : ctx_.stream->record();
  DSCORE_RETURN_IF_ERROR(order_views_after(ready, views_on));
  return memory;
}

Status IpgBuckets::place_solo(size_t layer, device::Stream* views_on) {
  const auto [s, e] = storage_.layer_range(layer);
  Solo solo;
  DSCORE_ASSIGN_OR_RETURN(solo.memory, solo_memory(e - s, /*zero=*/true, views_on));
  solo.lo = s;
  solo.hi = e;
  storage_.point_grads(storage_.layout().layer_first(layer), storage_.layout().layer_end(layer),
                       solo.memory.data(), s);
  placement_[layer] = {Placement::Kind::kSolo, solos_.size()};
  solos_.push_back(std::move(solo));
  return Status::Ok();
}

Status IpgBuckets::open_bucket(int64_t hi, device::Stream* views_on) {
  Bucket& bucket = buckets_[current_];
  // Its memory is free (and zero) again once its last reduction is done.
  DSCORE_RETURN_IF_ERROR(order_views_after(bucket.ticket, views_on));
  bucket.ticket.reset();
  bucket.hi = hi;
  bucket.lo = hi;
  bucket.pending = 0;
  bucket.sealed = false;
  open_ = true;
  return Status::Ok();
}

Status IpgBuckets::place(size_t layer, device::Stream* views_on) {
  const auto [s, e] = storage_.layer_range(layer);
  if (e - s > capacity_) return place_solo(layer, views_on);
  Bucket* bucket = &buckets_[current_];
  if (!open_ || bucket->lo != e || bucket->hi - s > capacity_) {
    // A bucket whose layers are not all ready (a model that comes back to a
    // layer later, e.g. a tied embedding) moves out; sealing it would let
    // its memory be reused before it is reduced.
    if (open_ && bucket->pending > 0) DSCORE_RETURN_IF_ERROR(detach_current_bucket(views_on));
    if (open_) seal_current_bucket();
    // A sealed bucket is in flight: fill the other. A detached one is zero
    // again and is reused.
    if (open_) current_ = (current_ + 1) % bucket_count_;
    DSCORE_RETURN_IF_ERROR(open_bucket(e, views_on));
    bucket = &buckets_[current_];
  }
  // The bucket's memory is zero here: fresh, or zeroed by its last
  // reduction task, which finished before open_bucket's wait (in the
  // model's stream order, or on the host).
  storage_.point_grads(storage_.layout().layer_first(layer), storage_.layout().layer_end(layer),
                       bucket->memory.data(), bucket->hi - capacity_);
  bucket->lo = s;
  bucket->pending += 1;
  placement_[layer] = {Placement::Kind::kBucket, current_};
  return Status::Ok();
}

Status IpgBuckets::detach_current_bucket(device::Stream* views_on) {
  Bucket& b = buckets_[current_];
  const dscore_dtype gd = ctx_.grad_dtype();
  Solo solo;
  // Overwritten whole by the copy below.
  DSCORE_ASSIGN_OR_RETURN(solo.memory, solo_memory(b.hi - b.lo, /*zero=*/false, views_on));
  solo.lo = b.lo;
  solo.hi = b.hi;
  solo.pending = b.pending;
  char* placed = element_at(b.memory.data(), gd, b.lo - (b.hi - capacity_));
  // Where the model writes its gradients: the compute stream's target.
  device::ops::copy(ctx_.compute_target, solo.memory.data(), placed, gd, b.hi - b.lo);
  device::ops::fill_zero(ctx_.compute_target, placed, gd,
                         b.hi - b.lo);  // free bucket memory is zero
  const ParamLayout& layout = storage_.layout();
  const size_t index = solos_.size();
  for (size_t l = 0; l < placement_.size(); ++l) {
    const int64_t first_offset = layout.params()[layout.layer_first(l)].offset;
    const Placement& at = placement_[l];
    if (at.kind != Placement::Kind::kBucket || at.index != current_ || first_offset < b.lo ||
        first_offset >= b.hi)
      continue;
    storage_.point_grads(layout.layer_first(l), layout.layer_end(l), solo.memory.data(), b.lo);
    placement_[l] = {Placement::Kind::kSolo, index};
  }
  solos_.push_back(std::move(solo));
  b.pending = 0;
  b.lo = b.hi;
  open_ = false;
  return Status::Ok();
}

void IpgBuckets::seal_current_bucket() {
  buckets_[current_].sealed = true;
  submit_bucket_if_complete(current_);
}

void IpgBuckets::submit_bucket_if_complete(size_t index) {
  Bucket& b = buckets_[index];
  if (!b.sealed || b.pending > 0 || b.ticket) return;
  b.ticket =
      submit_owner_reduction(static_cast<char*>(b.memory.data()), b.hi - capacity_, b.lo, b.hi);
  b.sealed = false;
}

Status IpgBuckets::layer_ready(size_t layer, const ReadyLayers&) {
  const Placement at = placement_[layer];
  if (at.kind == Placement::Kind::kBucket) {
    buckets_[at.index].pending -= 1;
    submit_bucket_if_complete(at.index);
  } else if (at.kind == Placement::Kind::kSolo) {
    Solo& solo = solos_[at.index];
    if (--solo.pending == 0)
      submit_owner_reduction(static_cast<char*>(solo.memory.data()), solo.lo, solo.lo, solo.hi);
  }
  return Status::Ok();
}

Status IpgBuckets::end_micro_step(const ReadyLayers& ready) {
  if (open_) seal_current_bucket();
  open_ = false;
  for (size_t l = 0; l < placement_.size(); ++l) {
    if (placement_[l].kind != Placement::Kind::kNotLent && !ready.ready(l))
      return invalid_argument("the model lent gradients for layer " + std::to_string(l) +
                              " but never called grads_ready for it");
  }
  Status status = ctx_.stream->synchronize();
  solos_.clear();
  return status;
}

device::EventPtr IpgBuckets::submit_owner_reduction(char* memory, int64_t window, int64_t lo,
                                                    int64_t hi) {
  device::EventPtr done = ctx_.stream->submit([this, memory, window, lo, hi] {
    const Reduction& r = ctx_.reduction;
    const dscore_dtype gd = ctx_.grad_dtype();
    const int rank = storage_.rank();
    const device::ops::Target on = ctx_.comm_target;
    device::ops::scale_in_place(on, element_at(memory, gd, lo - window), gd, hi - lo, r.pre_factor);
    const std::vector<OwnedPiece> pieces = split_by_owner(storage_.partition(), lo, hi);
    // One reduce per owner, grouped (they may run together); the owner's
    // slice is read only after the group.
    DSCORE_RETURN_IF_ERROR(ctx_.comm->grouped([&] {
      for (const OwnedPiece& piece : pieces) {
        const comm::CommBuffer send = device_buffer(
            ctx_.device, element_at(memory, gd, piece.begin - window), gd, piece.end - piece.begin);
        comm::CommBuffer recv;
        if (piece.rank == rank) recv = send;  // reduced in place, then added to the partition
        DSCORE_RETURN_IF_ERROR(ctx_.comm->reduce(send, recv, r.op, piece.rank));
      }
      return Status::Ok();
    }));
    for (const OwnedPiece& piece : pieces) {
      if (piece.rank != rank) continue;
      const int64_t n = piece.end - piece.begin;
      void* reduced = element_at(memory, gd, piece.begin - window);
      device::ops::scale_in_place(on, reduced, gd, n, r.post_factor);
      device::ops::accumulate(
          on, element_at(owned_.data(), gd, piece.begin - storage_.owned_begin()), reduced, gd, n);
    }
    // Clean for the next layers placed here, off the compute thread.
    device::ops::fill_zero(on, element_at(memory, gd, lo - window), gd, hi - lo);
    return Status::Ok();
  });
  // The boundary's reduction is the last write of this rank's part of [lo, hi).
  if (boundary_) {
    const int64_t begin = storage_.owned_begin(), end = begin + storage_.owned_numel();
    report_owned_grads_final(ctx_, std::max(lo, begin) - begin, std::min(hi, end) - begin, done);
  }
  return done;
}

}  // namespace dscore::zero
