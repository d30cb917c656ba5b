// The ledger (core/base/memory.h): allocations it makes and memory it only
// records (record_external / forget_external, how device memory is counted).
#include "core/base/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dscore {
namespace {

TEST(MemoryLedger, CountsAllocationsByKindUseAndTag) {
  MemoryLedger ledger;
  void* a = ledger.allocate(1000, 64, DSCORE_MEMORY_HOST, MemoryUse::kGradients, "grads");
  void* b = ledger.allocate(24, 64, DSCORE_MEMORY_PINNED, MemoryUse::kBuffers, "bucket");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_HOST).current_bytes, 1000u);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_PINNED).current_bytes, 24u);
  EXPECT_EQ(ledger.by_tag()["grads"], 1000u);
  EXPECT_EQ(ledger.by_use()[static_cast<size_t>(MemoryUse::kBuffers)], 24u);
  ledger.release(a);
  ledger.release(b);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_HOST).current_bytes, 0u);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_HOST).peak_bytes, 1000u);
}

TEST(MemoryLedger, RefusesDeviceMemoryAndAbsurdSizes) {
  MemoryLedger ledger;
  EXPECT_EQ(ledger.allocate(64, 64, DSCORE_MEMORY_DEVICE, MemoryUse::kOther, "x"), nullptr);
  EXPECT_EQ(ledger.allocate(SIZE_MAX - 4095, 64, DSCORE_MEMORY_HOST, MemoryUse::kOther, "x"),
            nullptr);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_HOST).current_bytes, 0u);
}

TEST(MemoryLedger, RecordsExternalMemoryWithoutOwningIt) {
  MemoryLedger ledger;
  // Stands in for device memory: the ledger must never free it.
  std::vector<char> storage(4096);
  void* p = storage.data();
  ledger.record_external(p, 4096, DSCORE_MEMORY_DEVICE, MemoryUse::kMaster, "master");
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_DEVICE).current_bytes, 4096u);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_DEVICE).peak_bytes, 4096u);
  EXPECT_EQ(ledger.by_use()[static_cast<size_t>(MemoryUse::kMaster)], 4096u);
  EXPECT_EQ(ledger.by_tag()["master"], 4096u);

  ledger.release(p);  // not the ledger's allocation: ignored, still recorded
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_DEVICE).current_bytes, 4096u);

  // Recording the same pointer again replaces the record.
  ledger.record_external(p, 1024, DSCORE_MEMORY_DEVICE, MemoryUse::kMaster, "master");
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_DEVICE).current_bytes, 1024u);

  ledger.forget_external(p);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_DEVICE).current_bytes, 0u);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_DEVICE).peak_bytes, 4096u);
  EXPECT_TRUE(ledger.by_tag().empty());
  storage[0] = 1;  // still ours and alive
}

TEST(MemoryLedger, ForgetIgnoresTheLedgersOwnAllocations) {
  MemoryLedger ledger;
  void* a = ledger.allocate(128, 64, DSCORE_MEMORY_HOST, MemoryUse::kOther, "own");
  ASSERT_NE(a, nullptr);
  ledger.forget_external(a);  // not external: the record stays
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_HOST).current_bytes, 128u);
  ledger.release(a);
  EXPECT_EQ(ledger.usage(DSCORE_MEMORY_HOST).current_bytes, 0u);
}

}  // namespace
}  // namespace dscore
