// Counted host buffers: zeroed by default, recorded under their name, and a
// size that cannot be had is a RESOURCE_EXHAUSTED Status naming the buffer
// and the bytes, never a std::bad_alloc.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/tensor/host_buffer.h"

#if defined(__SANITIZE_ADDRESS__)
// ASan aborts on impossible sizes unless told to return null like malloc.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace dscore::tensor {
namespace {

TEST(HostBuffer, ZeroedAndCountedUnderItsName) {
  auto buffer =
      allocate_elements(10, DSCORE_DTYPE_BF16, MemoryUse::kOther, "host_buffer_test zeroed");
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  const auto* bytes = static_cast<const unsigned char*>(buffer->get());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(memory_by_tag()["host_buffer_test zeroed"], 20u);
  buffer->reset();
  EXPECT_EQ(memory_by_tag().count("host_buffer_test zeroed"), 0u);
}

TEST(HostBuffer, CountedUnderTheUseGivenAtAllocation) {
  const MemoryByUse before = memory_by_use();
  auto buffer =
      allocate_elements(6, DSCORE_DTYPE_F32, MemoryUse::kOptimizerState, "host_buffer_test state");
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  const size_t slot = static_cast<size_t>(MemoryUse::kOptimizerState);
  EXPECT_EQ(memory_by_use()[slot] - before[slot], 24u);
  buffer->reset();
  EXPECT_EQ(memory_by_use()[slot], before[slot]);
  EXPECT_STREQ(memory_use_name(MemoryUse::kOptimizerState), "optimizer state");
}

TEST(HostBuffer, EmptyBufferStillHasOneElement) {
  auto buffer = allocate_elements(0, DSCORE_DTYPE_F32, MemoryUse::kOther, "host_buffer_test empty");
  ASSERT_TRUE(buffer.ok());
  EXPECT_NE(buffer->get(), nullptr);
  EXPECT_EQ(memory_by_tag()["host_buffer_test empty"], 4u);
}

TEST(HostBuffer, ElementAtAddressesByDtype) {
  char base[64];
  EXPECT_EQ(element_at(base, DSCORE_DTYPE_F32, 3), base + 12);
  EXPECT_EQ(element_at(base, DSCORE_DTYPE_BF16, 3), base + 6);
}

TEST(HostBuffer, MoreThanTheMachineHasIsResourceExhaustedNamingTheBuffer) {
  // 2^48 fp32 elements: 1 PiB, more than any address space here.
  auto buffer =
      allocate_elements(int64_t{1} << 48, DSCORE_DTYPE_F32, MemoryUse::kBuffers, "gradient bucket");
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_EQ(buffer.status().message(),
            "could not allocate 1125899906842624 bytes (1024.00 TiB) for gradient bucket");
}

TEST(HostBuffer, SizeBeyondSizeTIsResourceExhaustedToo) {
  auto buffer = allocate_elements(std::numeric_limits<int64_t>::max(), DSCORE_DTYPE_F32,
                                  MemoryUse::kMaster, "master weights fp32");
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  const std::string& message = buffer.status().message();
  EXPECT_NE(message.find("could not allocate"), std::string::npos) << message;
  EXPECT_NE(message.find("for master weights fp32"), std::string::npos) << message;
}

TEST(HostBuffer, BytesVariantNamesTheBufferToo) {
  auto buffer =
      allocate_bytes(std::numeric_limits<size_t>::max() / 2, MemoryUse::kOther, "staging");
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(buffer.status().message().find("for staging"), std::string::npos);
}

}  // namespace
}  // namespace dscore::tensor
