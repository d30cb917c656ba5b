// core/offload/swap_bandwidth: the ring of host buffers keeps two queues'
// worth of requests available in transfers of >= 16 MiB, and measure_swap
// moves the whole range through the nvme plugin on both backends (an
// overwrite writes it twice), leaves the file behind, and refuses sizes the
// swapper cannot transfer.
#include "core/offload/swap_bandwidth.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/core/offload/swapper_test_util.h"

namespace dscore::offload {
namespace {

config::AioConfig settings(int64_t block_size, int64_t queue_depth) {
  config::AioConfig s = config::default_aio();
  s.block_size = block_size;
  s.queue_depth = queue_depth;
  return s;
}

TEST(SwapRing, TwoFullQueuesInTransfersOfAtLeast16MiB) {
  constexpr uint64_t kMiB = 1 << 20;
  const uint64_t big = uint64_t{4} << 30;
  SwapRing small = swap_ring_for(settings(128 << 10, 4), big);
  EXPECT_EQ(small.transfer_bytes, 16 * kMiB);
  EXPECT_EQ(small.slots, 2u);  // never fewer: one fills while one drains
  SwapRing deep = swap_ring_for(settings(8 << 20, 32), big);
  EXPECT_EQ(deep.transfer_bytes, 16 * kMiB);
  EXPECT_EQ(deep.bytes(), 2 * 32 * 8 * kMiB);
  // Transfers are whole blocks, and a block larger than 16 MiB is one transfer.
  SwapRing odd = swap_ring_for(settings(3 * 4096, 8), big);
  EXPECT_EQ(odd.transfer_bytes % (3 * 4096), 0u);
  EXPECT_LE(odd.transfer_bytes, 16 * kMiB);
  EXPECT_GT(odd.transfer_bytes, 16 * kMiB - 3 * 4096);
  EXPECT_EQ(swap_ring_for(settings(32 << 20, 2), big).transfer_bytes, 32 * kMiB);
  // A file smaller than the ring needs no more memory than itself.
  EXPECT_EQ(swap_ring_for(settings(8 << 20, 64), 24 * kMiB).slots, 2u);
  EXPECT_EQ(swap_ring_for(settings(1 << 20, 8), kMiB).slots, 1u);
}

class MeasureSwap : public ::testing::TestWithParam<std::string> {};

TEST_P(MeasureSwap, MovesTheWholeRangeAndLeavesTheFile) {
  auto registry = testing::swapper_registry();
  ASSERT_TRUE(registry);
  testing::BackendEnv env(GetParam());
  auto swapper = make_swapper(*registry, settings(256 << 10, 4), plugin_host::InstanceContext{});
  if (!swapper.ok() && GetParam() == "io_uring" && swapper.status().code() == DSCORE_UNAVAILABLE)
    GTEST_SKIP() << "io_uring is unavailable here";
  ASSERT_TRUE(swapper.ok()) << swapper.status().message();
  testing::TempDir dir;
  const uint64_t bytes = (uint64_t{40} << 20) + 4096;  // three transfers, the last one page
  Result<SwapBandwidth> m = measure_swap(**swapper, dir.file("swap"), bytes);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->bytes, bytes);
  EXPECT_GT(m->write_gbps(), 0);
  EXPECT_GT(m->read_gbps(), 0);
  EXPECT_EQ((*swapper)->bytes_written(), bytes);
  EXPECT_EQ((*swapper)->bytes_read(), bytes);
  EXPECT_EQ(std::filesystem::file_size(dir.file("swap")), bytes);
  // The overwrite lays the range down first: written twice, read once.
  Result<SwapBandwidth> again = measure_swap(**swapper, dir.file("swap2"), bytes, true);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*swapper)->bytes_written(), 3 * bytes);
  EXPECT_EQ((*swapper)->bytes_read(), 2 * bytes);
}

TEST_P(MeasureSwap, RefusesSizesOffTheAlignment) {
  auto registry = testing::swapper_registry();
  ASSERT_TRUE(registry);
  testing::BackendEnv env(GetParam());
  auto swapper = make_swapper(*registry, settings(256 << 10, 4), plugin_host::InstanceContext{});
  if (!swapper.ok()) GTEST_SKIP() << swapper.status().message();
  testing::TempDir dir;
  Result<SwapBandwidth> m = measure_swap(**swapper, dir.file("swap"), 5000);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("alignment"), std::string::npos) << m.status().message();
}

INSTANTIATE_TEST_SUITE_P(Backends, MeasureSwap, ::testing::Values("io_uring", "threads"));

}  // namespace
}  // namespace dscore::offload
