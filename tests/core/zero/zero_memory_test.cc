// ZeRO's buffers come from the engine's device, or from counted host memory
// without one, and host code reaches them through upload/download: a copy on
// a device stream that has finished when the call returns.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/base/memory.h"
#include "core/device/cpu_device.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {
namespace {

using device::CpuDevice;
using device::CpuStreams;
using device::Placement;

TEST(ZeroMemory, WithoutADeviceBuffersAreCountedZeroedHostMemory) {
  Result<device::Buffer> buffer =
      allocate_buffer(nullptr, 5, DSCORE_DTYPE_F32, MemoryUse::kGradients, "zero_memory_test host");
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  EXPECT_EQ(buffer->placement(), Placement::kHost);
  EXPECT_EQ(buffer->bytes(), 20u);
  EXPECT_EQ(memory_by_tag()["zero_memory_test host"], 20u);
  const auto* values = static_cast<const float*>(buffer->data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(values[i], 0.0f);
  buffer->reset();
  EXPECT_EQ(memory_by_tag().count("zero_memory_test host"), 0u);
}

TEST(ZeroMemory, WithADeviceBuffersAreItsDeviceMemory) {
  CpuDevice device(CpuStreams::kAsynchronous);
  Result<device::Buffer> buffer = allocate_buffer(&device, 3, DSCORE_DTYPE_BF16,
                                                  MemoryUse::kParameters, "zero_memory_test dev");
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  EXPECT_EQ(buffer->placement(), Placement::kDevice);
  EXPECT_EQ(buffer->bytes(), 6u);
  EXPECT_EQ(memory_by_tag()["zero_memory_test dev"], 6u);
}

TEST(ZeroMemory, AnImpossibleSizeNamesTheBuffer) {
  CpuDevice device(CpuStreams::kSynchronous);
  Result<device::Buffer> buffer = allocate_buffer(&device, INT64_MAX / 2, DSCORE_DTYPE_F64,
                                                  MemoryUse::kMaster, "master weights fp32");
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(buffer.status().message().find("master weights fp32"), std::string::npos)
      << buffer.status().message();
}

// The copy is queued behind earlier work of the stream and has completed
// when upload/download return: the asynchronous CPU stream runs it on its
// worker, after a slow task that was enqueued first.
TEST(ZeroMemory, UploadAndDownloadHaveFinishedWhenTheyReturn) {
  CpuDevice device(CpuStreams::kAsynchronous);
  Result<std::unique_ptr<device::Stream>> stream = device.create_stream("copies");
  ASSERT_TRUE(stream.ok());
  Result<device::Buffer> buffer =
      allocate_buffer(&device, 1024, DSCORE_DTYPE_F32, MemoryUse::kMaster, "zero_memory_test up");
  ASSERT_TRUE(buffer.ok());
  std::vector<float> host(1024);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) + 0.5f;

  const auto slow = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return Status::Ok();
  };
  (*stream)->enqueue(slow);
  ASSERT_TRUE(upload(&device, stream->get(), buffer->data(), host.data(), 4096).ok());
  EXPECT_EQ(std::memcmp(buffer->data(), host.data(), 4096), 0);

  std::vector<float> back(1024, -1.0f);
  (*stream)->enqueue(slow);
  ASSERT_TRUE(download(&device, stream->get(), back.data(), buffer->data(), 4096).ok());
  EXPECT_EQ(back, host);
}

TEST(ZeroMemory, AFailedStreamFailsTheCopy) {
  CpuDevice device(CpuStreams::kAsynchronous);
  Result<std::unique_ptr<device::Stream>> stream = device.create_stream("copies");
  ASSERT_TRUE(stream.ok());
  (*stream)->enqueue([] { return internal_error("an earlier task failed"); });
  float value = 1.0f, out = 0.0f;
  const Status status = download(&device, stream->get(), &out, &value, sizeof(float));
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("an earlier task failed"), std::string::npos);
}

}  // namespace
}  // namespace dscore::zero
