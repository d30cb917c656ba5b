// Stage 3's gathers of shards on NVMe into device memory the host does not
// address (from a GPU; offload_param nvme, param_swap.h). A gather's disk
// reads are queued on the swapper's I/O thread when the gather starts (the
// prefetch along the acquire trace), straight into a pinned staging ring;
// its copies to device scratch and its allgather are enqueued on the comm
// stream later, once those reads are done. So the thread that starts
// gathers, which is also the one that enqueues the model's kernels, never
// waits for the disk at a prefetch, only when a layer it needs is not read
// yet:
//
//   gathers.add(packed, begin, at, count);      // per run of local shards
//   Id id = gathers.end(submit_allgather);      // in the comm stream's order
//   ...
//   gathers.advance();                          // what is read, without waiting
//   gathers.complete(id);                       // the acquire that needs it
//
// Gathers are submitted in the order they ended, so every rank issues its
// collectives in the same order as long as each completes its pending
// gathers before issuing another collective (complete_all).
//
// Shards in the resident part (max_in_cpu, pinned) are copied from where
// they are kept. A failure (a read, the ring, a submit) is sticky: every
// later call returns it, and the gathers still pending are dropped once
// their reads are done, their ring room handed back.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "core/device/device.h"
#include "core/device/ops.h"
#include "core/device/staging_ring.h"
#include "core/zero/param_swap.h"

namespace dscore::zero {

class SwappedGathers {
 public:
  using Id = uint64_t;  // gathers count from 1

  // A ring of `ring_bytes` pinned bytes on `device` (none when 0: every
  // shard is resident). `swap`, `device` and `stream` outlive this.
  static Result<std::unique_ptr<SwappedGathers>> create(ParamSwap& swap, device::Device& device,
                                                        device::Stream& stream,
                                                        device::ops::Target target,
                                                        dscore_dtype dtype, size_t ring_bytes);
  // Waits for the reads still queued (their room must not be freed under
  // them); drops the gathers not submitted.
  ~SwappedGathers();
  SwappedGathers(const SwappedGathers&) = delete;
  SwappedGathers& operator=(const SwappedGathers&) = delete;

  // Local elements [begin, begin + count) to element `at` of `packed`, as
  // part of the next gather to end. When the ring is full this enqueues the
  // oldest pieces' copies first (waiting for their reads).
  Status add(const std::shared_ptr<device::Buffer>& packed, int64_t begin, int64_t at,
             int64_t count);
  // Ends the gather of what was added since the last end(): `submit` runs
  // on the calling thread of advance()/complete() once its copies are
  // enqueued, and enqueues what uses them.
  Id end(std::function<Status()> submit);
  // Enqueues the copies of pieces whose reads are done and submits the
  // gathers they finish, in order, without waiting.
  Status advance();
  // The same up to and including gather `id` (no further), waiting for
  // its reads.
  Status complete(Id id);
  Status complete_all() { return complete(next_ - 1); }
  bool idle() const { return queue_.empty(); }
  size_t ring_bytes() const { return ring_.capacity(); }

 private:
  SwappedGathers(ParamSwap& swap, device::Stream& stream, device::ops::Target target,
                 dscore_dtype dtype)
      : swap_(swap), stream_(stream), target_(target), dtype_(dtype) {}
  // One entry of the queue: a piece to copy, or (submit set) a gather's end.
  struct Item {
    Id gather = 0;
    std::shared_ptr<device::Buffer> packed;
    int64_t at = 0, count = 0;  // elements of packed
    ParamSwap::Read read;       // ticket 0: a resident piece, `first` set at once
    bool in_ring = false;
    std::function<Status()> submit;
  };
  // Processes the queue front to back: through gather `through` waiting
  // for reads, or (0) up to the first piece not read yet; with
  // `free_ring_piece`, also until a ring piece's copy is enqueued.
  Status pump(Id through, bool free_ring_piece);
  // Waits for the queued reads and drops the queue, handing its ring room
  // back.
  void drop_queue();
  Status fail(Status status);

  ParamSwap& swap_;
  device::Stream& stream_;
  device::ops::Target target_;
  dscore_dtype dtype_;
  device::StagingRing ring_;
  std::deque<Item> queue_;
  size_t unconsumed_ = 0;  // ring pieces taken whose copies are not enqueued
  Id next_ = 1;            // the gather being added to
  Status failure_;
};

}  // namespace dscore::zero
