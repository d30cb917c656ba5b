// Pinned host memory that the host fills and a stream's work reads (uploads
// to device memory the host does not address): one buffer handed out front
// to back in pieces, each piece reused only once the work that read it is
// done. The host can run as far ahead of the stream as the ring holds,
// where one bounce buffer would wait for the stream at every piece.
//
//   void* at = ring.take(n);              // waits if the room is still read
//   fill(at); stream.enqueue(copy from at);
//   ring.consumed(stream.record());       // the pieces taken are read by then
//
// take() returns nullptr when the room it needs is held by pieces taken
// since the last consumed(): their reads are not enqueued yet, so waiting
// could never end. The caller enqueues those reads, calls consumed(), and
// takes again.
#pragma once

#include <cstddef>
#include <deque>
#include <string_view>

#include "core/device/device.h"

namespace dscore::device {

class StagingRing {
 public:
  StagingRing() = default;
  // `capacity` bytes of pinned memory from `device`, counted as buffers,
  // starting at a multiple of `alignment` (a power of two): `alignment`
  // bytes more are allocated for it.
  static Result<StagingRing> create(Device& device, size_t capacity, std::string_view name,
                                    size_t alignment = 64);
  // Waits for the work that still reads the ring (errors ignored: the
  // stream reports them).
  ~StagingRing();
  StagingRing(StagingRing&&) = default;
  StagingRing& operator=(StagingRing&&) = default;

  // `bytes` (1 to capacity()) of the ring at a multiple of `alignment` (at
  // most create()'s), once the work that read them before is done; nullptr
  // while they are held by pieces not yet consumed(). A failure of that
  // work seen while waiting for it is returned; work found done is not
  // asked again (its stream reports its failures to whoever synchronises
  // it).
  Result<void*> take(size_t bytes, size_t alignment = 64);
  // Every piece taken since the last call is read by work that is done when
  // `event` is.
  void consumed(const EventPtr& event);
  // The oldest `pieces` of those (at most as many as there are): work that
  // reads later pieces is enqueued after `event` was recorded.
  void consumed(const EventPtr& event, size_t pieces);
  size_t capacity() const { return capacity_; }

 private:
  struct Piece {
    size_t begin, end;
    EventPtr read;  // null until consumed()
  };
  Buffer memory_;
  char* base_ = nullptr;  // memory_'s first byte at create()'s alignment
  size_t capacity_ = 0, alignment_ = 64;
  std::deque<Piece> held_;  // in the order taken
  size_t head_ = 0;         // where the next piece starts, unless it wraps
};

}  // namespace dscore::device
