// Stage 3's parameter file (core/zero/param_swap.h) over the nvme plugin:
// loads that cross the resident part, the granules and the read chunks
// (two staging buffers of 8 MiB in turn) return what was stored, and the
// resident part is host memory or, given a device, pinned memory that
// resident_at() points into. Then the gathers from it into separate memory
// (core/zero/swapped_gathers.h): submitted in order, each once its reads
// are done, with the shards it asked for; a failed read sticks.
#include "core/zero/param_swap.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/device/cpu_device.h"
#include "core/zero/plan.h"
#include "core/zero/swapped_gathers.h"
#include "tests/core/offload/swapper_test_util.h"

namespace dscore::zero {
namespace {

// Two read chunks and a bit: 5,000,000 bf16 elements (10 MB).
constexpr int64_t kLocal = 5000000;
constexpr int64_t kResident = 3 * kTileGranularity;

uint16_t pattern(int64_t i) { return static_cast<uint16_t>((i * 2654435761u) >> 7); }

class ParamSwapTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(nvme_.swapper); }
  // A ParamSwap with the pattern stored, laid down front to back in whole
  // granules as ShardedZero does.
  std::unique_ptr<ParamSwap> stored(device::Device* pinned_on = nullptr,
                                    offload::Swapper* swapper = nullptr, int64_t local = kLocal,
                                    int64_t resident = kResident) {
    auto swap =
        ParamSwap::create(swapper != nullptr ? swapper : nvme_.swapper.get(),
                          dir_.file("params/rank0"), local, DSCORE_DTYPE_BF16, resident, pinned_on);
    EXPECT_TRUE(swap.ok()) << swap.status().message();
    if (!swap.ok()) return nullptr;
    const int64_t piece = int64_t{1} << 22;
    std::vector<uint16_t> values(static_cast<size_t>(piece));
    for (int64_t a = 0; a < local; a += piece) {
      const int64_t n = std::min(piece, local - a);
      for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = pattern(a + i);
      EXPECT_TRUE((*swap)->store(a, n, values.data()).ok());
    }
    EXPECT_TRUE((*swap)->flush().ok());
    return std::move(*swap);
  }
  void expect_loads(ParamSwap& swap, int64_t begin, int64_t count) {
    std::vector<uint16_t> out(static_cast<size_t>(count), 0);
    ASSERT_TRUE(swap.load(begin, count, out.data()).ok()) << begin << " + " << count;
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < count; ++i)
      if (out[static_cast<size_t>(i)] != pattern(begin + i) && wrong++ == 0) first = begin + i;
    EXPECT_EQ(wrong, 0) << "loading [" << begin << ", " << begin + count << "): first wrong at "
                        << first;
  }

  offload::testing::TempDir dir_;
  offload::testing::NvmeSwapper nvme_;
};

TEST_F(ParamSwapTest, LoadsAcrossTheResidentPartGranulesAndReadChunksGiveWhatWasStored) {
  auto swap = stored();
  ASSERT_TRUE(swap);
  EXPECT_EQ(swap->resident_elements(), kResident);
  expect_loads(*swap, 0, kLocal);                      // everything: both chunks, twice
  expect_loads(*swap, 100, 50);                        // inside the resident part
  expect_loads(*swap, kResident - 7, 4100);            // across its end, unaligned
  expect_loads(*swap, 4194304 - 3001, 5000);           // across the first chunk's end
  expect_loads(*swap, 1234567, kLocal - 1234567 - 1);  // all but the last element
  // The read staging is the plan's: two chunks of 8 MiB.
  EXPECT_EQ(param_read_staging_bytes(kLocal, kResident, DSCORE_DTYPE_BF16),
            2 * kParamReadChunkBytes);
  EXPECT_EQ(param_read_staging_bytes(5001, 0, DSCORE_DTYPE_BF16), 2 * 8192 * 2);
  EXPECT_EQ(param_read_staging_bytes(5001, 5001, DSCORE_DTYPE_BF16), 0);
}

TEST_F(ParamSwapTest, TheResidentPartIsPinnedWhenADeviceIsGiven) {
  device::CpuDevice device(device::CpuStreams::kSynchronous, device::CpuMemory::kSeparate);
  const uint64_t before = memory_by_tag()["parameters (resident of offload_param)"];
  const uint64_t pinned_before = memory_usage(DSCORE_MEMORY_PINNED).current_bytes;
  auto swap = stored(&device);
  ASSERT_TRUE(swap);
  EXPECT_EQ(memory_by_tag()["parameters (resident of offload_param)"] - before, kResident * 2);
  EXPECT_EQ(memory_usage(DSCORE_MEMORY_PINNED).current_bytes - pinned_before, kResident * 2);
  const auto* resident = static_cast<const uint16_t*>(swap->resident_at(0));
  for (int64_t i = 0; i < kResident; ++i) ASSERT_EQ(resident[i], pattern(i)) << i;
  expect_loads(*swap, kResident - 7, 4100);
}

// ------------------------------------------------------------ gathers

class SwappedGathersTest : public ParamSwapTest {
 protected:
  void SetUp() override {
    ParamSwapTest::SetUp();
    auto stream = device_.create_stream("comm");
    ASSERT_TRUE(stream.ok());
    stream_ = std::move(*stream);
  }
  // Ring room for `granules` granules of pieces, plus the span slack.
  std::unique_ptr<SwappedGathers> gathers(ParamSwap& swap, int64_t granules) {
    auto made = SwappedGathers::create(
        swap, device_, *stream_, device::ops::Target::cpu(), DSCORE_DTYPE_BF16,
        static_cast<size_t>((granules + kParamSwapSpanEnds / kTileGranularity) * kTileGranularity *
                            2));
    EXPECT_TRUE(made.ok()) << made.status().message();
    return made.ok() ? std::move(*made) : nullptr;
  }
  // A gather of local elements [begin, begin + count): its submit notes
  // `tag` in order_ and queues a check of what its copies packed.
  Result<SwappedGathers::Id> gather(SwappedGathers& g, int64_t begin, int64_t count, int tag) {
    DSCORE_ASSIGN_OR_RETURN(
        device::Buffer buffer,
        device_.allocate(static_cast<size_t>(count) * 2, device::Placement::kDevice,
                         MemoryUse::kBuffers, "packed shards", false));
    auto packed = std::make_shared<device::Buffer>(std::move(buffer));
    DSCORE_RETURN_IF_ERROR(g.add(packed, begin, 0, count));
    return g.end([this, packed, begin, count, tag] {
      order_.push_back(tag);
      stream_->enqueue([this, packed, begin, count] {
        const auto* got = static_cast<const uint16_t*>(packed->data());
        for (int64_t i = 0; i < count; ++i)
          if (got[i] != pattern(begin + i)) wrong_ += 1;
        return Status::Ok();
      });
      return Status::Ok();
    });
  }

  device::CpuDevice device_{device::CpuStreams::kAsynchronous, device::CpuMemory::kSeparate};
  std::unique_ptr<device::Stream> stream_;
  std::vector<int> order_;
  std::atomic<int64_t> wrong_{0};
};

TEST_F(SwappedGathersTest, GathersAreSubmittedInTheOrderTheyEndedWithTheShardsAsked) {
  auto swap = stored(&device_);
  ASSERT_TRUE(swap);
  auto g = gathers(*swap, 3);  // pieces of at most 3 granules
  ASSERT_TRUE(g);
  // Across the resident part's end; two pieces; a gather 15 times the
  // ring, which has to copy its own first pieces to go on.
  auto first = gather(*g, kResident - 100, 5000, 1);
  auto second = gather(*g, 100000, 3 * kTileGranularity + 5, 2);
  ASSERT_TRUE(first.ok() && second.ok());
  auto third = gather(*g, 2000001, 45 * kTileGranularity, 3);
  ASSERT_TRUE(third.ok()) << third.status().message();
  ASSERT_TRUE(g->complete(*second).ok());
  EXPECT_EQ(order_, (std::vector<int>{1, 2}));
  EXPECT_FALSE(g->idle());
  ASSERT_TRUE(g->complete_all().ok());
  EXPECT_EQ(order_, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(g->idle());
  ASSERT_TRUE(stream_->synchronize().ok());
  EXPECT_EQ(wrong_.load(), 0);
}

TEST_F(SwappedGathersTest, AdvanceSubmitsAGatherOnceItsReadsAreDone) {
  auto swap = stored(&device_);
  ASSERT_TRUE(swap);
  auto g = gathers(*swap, 64);
  ASSERT_TRUE(g);
  ASSERT_TRUE(gather(*g, 1000000, 100000, 1).ok());
  EXPECT_TRUE(order_.empty());  // end() only queues
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (order_.empty() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(g->advance().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(order_, (std::vector<int>{1}));
  ASSERT_TRUE(stream_->synchronize().ok());
  EXPECT_EQ(wrong_.load(), 0);
}

TEST_F(SwappedGathersTest, AFailedReadSticksAndDropsTheGathersQueuedAfterIt) {
  // The faulty swapper fails its 20th request (of 4096 bytes): storing
  // 64 KiB takes 16, the first gather's granule 17-18, the second's 19-20.
  config::AioConfig aio = config::default_aio();
  aio.block_size = 4096;
  aio.queue_depth = 1;
  json::Value extra = json::Value::object();
  extra.set("fail_request", json::Value(20));
  auto swapper = offload::make_swapper(*nvme_.registry, aio, {}, "fake_faulty_swapper", extra);
  ASSERT_TRUE(swapper.ok()) << swapper.status().message();
  constexpr int64_t kSmall = 8 * kTileGranularity;
  auto swap = stored(&device_, swapper->get(), kSmall, 0);
  ASSERT_TRUE(swap);
  auto g = gathers(*swap, 2);
  ASSERT_TRUE(g);
  auto first = gather(*g, 0, kTileGranularity, 1);
  auto second = gather(*g, kTileGranularity, kTileGranularity, 2);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(g->complete(*first).ok());
  // Refused at once if the I/O thread already failed request 20.
  auto third = gather(*g, 2 * kTileGranularity, 10, 3);
  const Status failed = g->complete_all();
  EXPECT_EQ(failed.code(), DSCORE_UNAVAILABLE) << failed.message();
  EXPECT_NE(failed.message().find("params_bf16.swp at byte offset 12288"), std::string::npos)
      << failed.message();
  if (!third.ok()) {
    EXPECT_EQ(third.status().message(), failed.message());
  }
  EXPECT_EQ(order_, (std::vector<int>{1}));
  EXPECT_TRUE(g->idle());
  EXPECT_EQ(gather(*g, 0, 10, 4).status().message(), failed.message());
  EXPECT_EQ(g->complete_all().message(), failed.message());
  g.reset();  // the ring's room handed back: nothing waits forever
  ASSERT_TRUE(stream_->synchronize().ok());
  EXPECT_EQ(wrong_.load(), 0);
}

}  // namespace
}  // namespace dscore::zero
