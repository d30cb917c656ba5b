#include "core/device/staging_ring.h"

#include <string>

#include "core/base/strings.h"

namespace dscore::device {
namespace {

constexpr size_t kAlignment = 64;

bool overlaps(size_t begin, size_t end, size_t lo, size_t hi) { return begin < hi && lo < end; }

}  // namespace

Result<StagingRing> StagingRing::create(Device& device, size_t capacity, std::string_view name) {
  StagingRing ring;
  DSCORE_ASSIGN_OR_RETURN(ring.memory_, device.allocate(capacity, Placement::kPinned,
                                                        MemoryUse::kBuffers, name, false));
  return ring;
}

StagingRing::~StagingRing() {
  for (const Piece& piece : held_)
    if (piece.read) (void)piece.read->wait();
}

Result<void*> StagingRing::take(size_t bytes) {
  const size_t capacity = memory_.bytes();
  if (bytes == 0 || bytes > capacity)
    return Status(DSCORE_INVALID_ARGUMENT, "a piece of " + format_bytes(bytes) +
                                               " does not fit a staging ring of " +
                                               format_bytes(capacity));
  // A piece that does not fit before the end starts at 0, and the tail it
  // skips is freed with it: pieces are held in address order within a lap,
  // so what is in the way is at the front of held_.
  const bool wraps = head_ + bytes > capacity;
  const size_t begin = wraps ? 0 : head_;
  while (!held_.empty()) {
    const Piece& oldest = held_.front();
    const bool in_way = overlaps(oldest.begin, oldest.end, begin, begin + bytes) ||
                        (wraps && overlaps(oldest.begin, oldest.end, head_, capacity));
    if (!in_way) break;
    if (!oldest.read) return nullptr;
    if (!oldest.read->done()) DSCORE_RETURN_IF_ERROR(oldest.read->wait());
    held_.pop_front();
  }
  const size_t end = std::min(capacity, (begin + bytes + kAlignment - 1) / kAlignment * kAlignment);
  held_.push_back({begin, end, nullptr});
  head_ = end;
  return static_cast<char*>(memory_.data()) + begin;
}

void StagingRing::consumed(const EventPtr& event) {
  for (auto it = held_.rbegin(); it != held_.rend() && !it->read; ++it) it->read = event;
}

}  // namespace dscore::device
