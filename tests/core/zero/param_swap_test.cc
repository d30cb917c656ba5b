// Stage 3's parameter file (core/zero/param_swap.h) over the nvme plugin:
// loads that cross the resident part, the granules and the read chunks
// (two staging buffers of 8 MiB in turn) return what was stored, and the
// resident part is host memory or, given a device, pinned memory that
// resident_at() points into.
#include "core/zero/param_swap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/device/cpu_device.h"
#include "core/zero/plan.h"
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
  std::unique_ptr<ParamSwap> stored(device::Device* pinned_on = nullptr) {
    auto swap = ParamSwap::create(nvme_.swapper.get(), dir_.file("params/rank0"), kLocal,
                                  DSCORE_DTYPE_BF16, kResident, pinned_on);
    EXPECT_TRUE(swap.ok()) << swap.status().message();
    if (!swap.ok()) return nullptr;
    const int64_t piece = int64_t{1} << 22;
    std::vector<uint16_t> values(static_cast<size_t>(piece));
    for (int64_t a = 0; a < kLocal; a += piece) {
      const int64_t n = std::min(piece, kLocal - a);
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

}  // namespace
}  // namespace dscore::zero
