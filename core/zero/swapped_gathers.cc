#include "core/zero/swapped_gathers.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/tensor/host_buffer.h"
#include "core/zero/plan.h"

namespace dscore::zero {

using tensor::element_at;

Result<std::unique_ptr<SwappedGathers>> SwappedGathers::create(
    ParamSwap& swap, device::Device& device, device::Stream& stream, device::ops::Target target,
    dscore_dtype dtype, size_t ring_bytes) {
  std::unique_ptr<SwappedGathers> gathers(new SwappedGathers(swap, stream, target, dtype));
  if (ring_bytes > 0) {
    DSCORE_ASSIGN_OR_RETURN(
        gathers->ring_, device::StagingRing::create(
                            device, ring_bytes, "nvme parameter staging ring", swap.alignment()));
  }
  return gathers;
}

SwappedGathers::~SwappedGathers() { drop_queue(); }

void SwappedGathers::drop_queue() {
  for (const Item& item : queue_)
    if (item.read.ticket != 0) (void)swap_.finish_read(item.read);
  queue_.clear();
  // The ring's room, consumed or not, is only read by work the stream
  // finishes before the ring is freed (its destructor waits for that).
  if (unconsumed_ > 0) ring_.consumed(stream_.record());
  unconsumed_ = 0;
}

Status SwappedGathers::add(const std::shared_ptr<device::Buffer>& packed, int64_t begin, int64_t at,
                           int64_t count) {
  DSCORE_RETURN_IF_ERROR(failure_);
  const int64_t resident = swap_.resident_elements();
  if (begin < resident) {  // kept in pinned memory: copied from there
    const int64_t n = std::min(count, resident - begin);
    queue_.push_back({next_, packed, at, n, {0, swap_.resident_at(begin)}, false, nullptr});
    begin += n, at += n, count -= n;
  }
  const auto es = static_cast<int64_t>(sdk::dtype_size(dtype_));
  const int64_t ring_elements = static_cast<int64_t>(ring_.capacity()) / es;
  while (count > 0) {
    // Read straight into the ring: a piece's aligned span is up to
    // kParamSwapSpanEnds longer than the piece (plan.h).
    const int64_t n = std::min(ring_elements - kParamSwapSpanEnds, count);
    if (n <= 0) return fail(internal_error("the parameter staging ring is smaller than its slack"));
    Result<void*> room = ring_.take(swap_.span_bytes(begin, n), swap_.alignment());
    if (!room.ok()) return fail(room.status());
    if (*room == nullptr) {  // held by pieces whose copies are not enqueued
      if (unconsumed_ == 0)
        return fail(internal_error("the parameter staging ring is held by no one"));
      DSCORE_RETURN_IF_ERROR(pump(0, /*free_ring_piece=*/true));
      continue;
    }
    unconsumed_ += 1;
    Result<ParamSwap::Read> read = swap_.start_read_into(begin, n, *room);
    if (!read.ok()) return fail(read.status());
    queue_.push_back({next_, packed, at, n, *read, true, nullptr});
    begin += n, at += n, count -= n;
  }
  return Status::Ok();
}

SwappedGathers::Id SwappedGathers::end(std::function<Status()> submit) {
  Item item;
  item.gather = next_;
  item.submit = std::move(submit);
  queue_.push_back(std::move(item));
  return next_++;
}

Status SwappedGathers::advance() { return pump(0, false); }

Status SwappedGathers::complete(Id id) { return pump(id, false); }

Status SwappedGathers::pump(Id through, bool free_ring_piece) {
  DSCORE_RETURN_IF_ERROR(failure_);
  struct Copy {
    std::shared_ptr<device::Buffer> packed;
    int64_t at, count;
    const void* from;
  };
  std::vector<Copy> copies;
  size_t ring_pieces = 0;
  // The copies so far in one comm-stream task; the ring's room they read is
  // free again once it is done.
  auto send = [&] {
    if (copies.empty()) return;
    stream_.enqueue([copies = std::move(copies), target = target_, dtype = dtype_] {
      for (const Copy& c : copies)
        device::ops::copy(target, element_at(c.packed->data(), dtype, c.at), c.from, dtype,
                          c.count);
      return Status::Ok();
    });
    copies.clear();
    if (ring_pieces == 0) return;
    ring_.consumed(stream_.record(), ring_pieces);
    unconsumed_ -= ring_pieces;
    ring_pieces = 0;
    free_ring_piece = false;
  };
  while (!queue_.empty()) {
    Item& front = queue_.front();
    if (through != 0 && front.gather > through && !free_ring_piece) break;
    if (front.read.ticket != 0) {
      const bool needed = front.gather <= through || free_ring_piece;
      if (!needed && !swap_.read_done(front.read)) break;
      Status read = swap_.finish_read(front.read);
      front.read.ticket = 0;
      if (!read.ok()) {
        send();
        return fail(read);
      }
    }
    if (front.submit) {
      send();
      std::function<Status()> submit = std::move(front.submit);
      queue_.pop_front();
      Status submitted = submit();
      if (!submitted.ok()) return fail(submitted);
      continue;
    }
    copies.push_back({std::move(front.packed), front.at, front.count, front.read.first});
    ring_pieces += front.in_ring ? 1 : 0;
    queue_.pop_front();
    if (free_ring_piece && ring_pieces > 0) send();
  }
  send();
  return Status::Ok();
}

Status SwappedGathers::fail(Status status) {
  failure_ = status;
  drop_queue();
  return status;
}

}  // namespace dscore::zero
