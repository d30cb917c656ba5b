// The staging ring (core/device/staging_ring.h): pieces handed out front to
// back and aligned as asked (random sequences too), wrapping at the end; a piece's room is handed
// out again only after the work that read it is done (made late on purpose by a Gate the test
// opens), never while its reads are not enqueued; failures of that work come back from take().
#include "core/device/staging_ring.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/device/cpu_device.h"
#include "tests/core/device/gate.h"

namespace dscore::device {
namespace {

using testing::Gate;
using namespace std::chrono_literals;

class StagingRingTest : public ::testing::Test {
 protected:
  StagingRing ring(size_t capacity) {
    auto r = StagingRing::create(device_, capacity, "test staging");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }
  std::unique_ptr<Stream> stream() {
    auto s = device_.create_stream("copies");
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(s).value();
  }
  char* take(StagingRing& ring, size_t bytes) {
    auto at = ring.take(bytes);
    EXPECT_TRUE(at.ok()) << at.status().message();
    return at.ok() ? static_cast<char*>(*at) : nullptr;
  }

  CpuDevice device_{CpuStreams::kAsynchronous, CpuMemory::kSeparate};
};

TEST_F(StagingRingTest, HandsOutAlignedPiecesInOrderAndWraps) {
  StagingRing r = ring(256);
  auto s = stream();
  char* first = take(r, 100);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  EXPECT_EQ(take(r, 100), first + 128);  // rounded up to 64 bytes
  r.consumed(s->record());
  // 28 bytes are left at the end: the next piece starts over at the front.
  EXPECT_EQ(take(r, 100), first);
  EXPECT_EQ(take(r, 28), first + 128);
  EXPECT_EQ(r.capacity(), 256u);
}

TEST_F(StagingRingTest, RoomHeldByPiecesNotYetConsumedIsNotHandedOut) {
  StagingRing r = ring(256);
  auto s = stream();
  char* first = take(r, 200);
  auto again = r.take(100);  // would wrap onto the first piece, whose reads are not enqueued
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, nullptr);
  r.consumed(s->record());
  EXPECT_EQ(take(r, 100), first);
}

TEST_F(StagingRingTest, RoomIsHandedOutAgainOnlyAfterItsReadsAreDone) {
  StagingRing r = ring(128);
  auto s = stream();
  char* piece = take(r, 128);
  std::memset(piece, 0x11, 128);
  Gate gate;
  unsigned char read = 0;
  s->enqueue([&] {
    gate.pass();
    read = static_cast<unsigned char>(piece[127]);
    return Status::Ok();
  });
  r.consumed(s->record());
  std::thread opener([&] {
    std::this_thread::sleep_for(50ms);
    gate.open();
  });
  char* again = take(r, 128);  // blocks until the read above is done
  std::memset(again, 0x22, 128);
  opener.join();
  ASSERT_TRUE(s->synchronize().ok());
  EXPECT_EQ(again, piece);
  EXPECT_EQ(read, 0x11) << "the room was handed out again before its reader was done";
}

TEST_F(StagingRingTest, AFailedReaderIsReportedAndPiecesLargerThanTheRingAreRefused) {
  StagingRing r = ring(128);
  auto s = stream();
  ASSERT_NE(take(r, 64), nullptr);
  Gate gate;
  s->enqueue([&] {
    gate.pass();
    return Status(DSCORE_UNAVAILABLE, "the copy failed");
  });
  EventPtr read = s->record();
  r.consumed(read);
  ASSERT_FALSE(read->done());  // the reader fails while take() waits for it
  std::thread opener([&] {
    std::this_thread::sleep_for(100ms);
    gate.open();
  });
  auto blocked = r.take(128);
  opener.join();
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().message(), "the copy failed");
  auto large = r.take(129);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(large.status().message().find("does not fit a staging ring"), std::string::npos)
      << large.status().message();
}

// An event that is done only once waited for: the test sees which reads
// the ring waited for.
class WaitedEvent final : public Event {
 public:
  Status wait() override {
    waited = true;
    return Status::Ok();
  }
  bool done() const override { return waited; }
  bool waited = false;
};

// Random pieces of random alignments: no piece handed out overlaps one
// whose reads were not waited for, and every piece is aligned as asked.
TEST_F(StagingRingTest, NoPieceOverlapsOneWhoseReadsWereNotWaitedFor) {
  const size_t capacity = 5 * 4096 + 320;
  auto created = StagingRing::create(device_, capacity, "test staging", 4096);
  ASSERT_TRUE(created.ok()) << created.status().message();
  StagingRing& r = *created;
  struct Taken {
    char* begin;
    size_t bytes;
    std::shared_ptr<WaitedEvent> read;  // null until consumed
  };
  std::vector<Taken> taken;
  std::mt19937 random(7);
  char* lowest = nullptr;
  auto consume = [&] {
    auto event = std::make_shared<WaitedEvent>();
    r.consumed(event);
    for (Taken& t : taken)
      if (!t.read) t.read = event;
  };
  for (int i = 0; i < 2000; ++i) {
    const size_t bytes = 1 + random() % (capacity / 2);
    const size_t alignment = random() % 3 == 0 ? 4096 : 64;
    if (random() % 4 == 0) consume();
    auto at = r.take(bytes, alignment);
    ASSERT_TRUE(at.ok()) << at.status().message();
    if (*at == nullptr) {  // held by pieces not consumed: consume and take again
      consume();
      at = r.take(bytes, alignment);
      ASSERT_TRUE(at.ok() && *at != nullptr) << "nothing unconsumed is left in the way";
    }
    char* begin = static_cast<char*>(*at);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(begin) % alignment, 0u) << "piece " << i;
    if (lowest == nullptr || begin < lowest) lowest = begin;
    ASSERT_LE(static_cast<size_t>(begin - lowest) + bytes, capacity) << "piece " << i;
    for (const Taken& t : taken) {
      const bool overlap = begin < t.begin + t.bytes && t.begin < begin + bytes;
      ASSERT_FALSE(overlap && !(t.read && t.read->waited))
          << "piece " << i << " overlaps an earlier one whose reads were not waited for";
    }
    taken.push_back({begin, bytes, nullptr});
  }
}

}  // namespace
}  // namespace dscore::device
