#include "core/device/staging_ring.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/base/strings.h"

namespace dscore::device {
namespace {

constexpr size_t kAlignment = 64;

bool overlaps(size_t begin, size_t end, size_t lo, size_t hi) { return begin < hi && lo < end; }

}  // namespace

Result<StagingRing> StagingRing::create(Device& device, size_t capacity, std::string_view name,
                                        size_t alignment) {
  StagingRing ring;
  alignment = std::max(alignment, kAlignment);
  DSCORE_ASSIGN_OR_RETURN(ring.memory_, device.allocate(capacity + alignment, Placement::kPinned,
                                                        MemoryUse::kBuffers, name, false));
  const auto address = reinterpret_cast<uintptr_t>(ring.memory_.data());
  ring.base_ =
      static_cast<char*>(ring.memory_.data()) + ((alignment - address % alignment) % alignment);
  ring.capacity_ = capacity;
  ring.alignment_ = alignment;
  return ring;
}

StagingRing::~StagingRing() {
  for (const Piece& piece : held_)
    if (piece.read) (void)piece.read->wait();
}

Result<void*> StagingRing::take(size_t bytes, size_t alignment) {
  const size_t capacity = capacity_;
  if (bytes == 0 || bytes > capacity || alignment > alignment_ || (alignment & (alignment - 1)))
    return Status(DSCORE_INVALID_ARGUMENT,
                  "a piece of " + format_bytes(bytes) + " aligned to " + std::to_string(alignment) +
                      " bytes does not fit a staging ring of " + format_bytes(capacity) +
                      " aligned to " + std::to_string(alignment_));
  // The piece takes the ring from the head to its end: the gap its
  // alignment skips, and when it does not fit before the end (it starts
  // at 0) the tail, are freed with it. Pieces are held in address order
  // within a lap, so what is in the way is at the front of held_.
  const size_t aligned_head = (head_ + alignment - 1) / alignment * alignment;
  const bool wraps = aligned_head + bytes > capacity;
  const size_t begin = wraps ? 0 : aligned_head;
  while (!held_.empty()) {
    const Piece& oldest = held_.front();
    const bool in_way = wraps ? overlaps(oldest.begin, oldest.end, head_, capacity) ||
                                    overlaps(oldest.begin, oldest.end, 0, bytes)
                              : overlaps(oldest.begin, oldest.end, head_, begin + bytes);
    if (!in_way) break;
    if (!oldest.read) return nullptr;
    if (!oldest.read->done()) DSCORE_RETURN_IF_ERROR(oldest.read->wait());
    held_.pop_front();
  }
  const size_t end = std::min(capacity, (begin + bytes + kAlignment - 1) / kAlignment * kAlignment);
  held_.push_back({begin, end, nullptr});
  head_ = end;
  return base_ + begin;
}

void StagingRing::consumed(const EventPtr& event) {
  for (auto it = held_.rbegin(); it != held_.rend() && !it->read; ++it) it->read = event;
}

void StagingRing::consumed(const EventPtr& event, size_t pieces) {
  // The unconsumed pieces are the newest: after every consumed one.
  for (auto it = held_.begin(); it != held_.end() && pieces > 0; ++it) {
    if (it->read) continue;
    it->read = event;
    --pieces;
  }
}

}  // namespace dscore::device
