// The host services table (core/plugin_host/host_api.cc) as a plugin sees
// it, through a host context (host_context.h): per-thread errors, the
// key-value store with its timeout, counted memory, profiling ranges, the
// communicator groups, logging; and two contexts that share nothing.
#include "core/plugin_host/host_api.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/base/memory.h"
#include "core/device/cpu_device.h"
#ifdef DSCORE_TEST_WITH_CUDA
#include "core/device/cuda_device.h"
#endif

namespace dscore::plugin_host {
namespace {

const dscore_host_api* api() { return host_api(); }

class HostApi : public ::testing::Test {
 protected:
  HostContext host_;
  dscore_host_context* ctx() { return host_.handle(); }
};

TEST_F(HostApi, DescribesItsVersion) {
  EXPECT_EQ(api()->struct_size, sizeof(dscore_host_api));
  EXPECT_EQ(api()->abi_major, 1u);
  EXPECT_EQ(api()->abi_minor, static_cast<uint32_t>(DSCORE_ABI_VERSION_MINOR));
  ASSERT_NE(api()->host_version, nullptr);
  EXPECT_STRNE(api()->host_version, "");
  EXPECT_STRNE(api()->host_version, "unknown");
}

TEST_F(HostApi, SetErrorIsPerThreadAndReturnsTheCode) {
  EXPECT_EQ(api()->set_error(ctx(), DSCORE_INVALID_ARGUMENT, "main thread"),
            DSCORE_INVALID_ARGUMENT);
  std::optional<std::pair<dscore_status, std::string>> other;
  std::thread t([&] {
    EXPECT_FALSE(host_.take_error());  // the main thread's error is not visible here
    api()->set_error(ctx(), DSCORE_INTERNAL, "other thread");
    other = host_.take_error();
  });
  t.join();
  ASSERT_TRUE(other);
  EXPECT_EQ(other->first, DSCORE_INTERNAL);
  EXPECT_EQ(other->second, "other thread");
  auto mine = host_.take_error();
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->first, DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(mine->second, "main thread");
  EXPECT_FALSE(host_.take_error());  // taken means cleared
  api()->set_error(ctx(), DSCORE_NOT_FOUND, nullptr);
  EXPECT_EQ(host_.take_error()->second, "");
}

TEST_F(HostApi, TwoContextsShareNoErrorMemoryStoreOrCommunicator) {
  HostContext other;
  api()->set_error(ctx(), DSCORE_INTERNAL, "mine");
  EXPECT_FALSE(other.take_error());
  void* p = api()->alloc(other.handle(), 4096, 0, DSCORE_MEMORY_HOST, "other_engine");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(other.memory().by_tag()["other_engine"], 4096u);
  EXPECT_EQ(host_.memory().by_tag().count("other_engine"), 0u);
  api()->free(other.handle(), p, DSCORE_MEMORY_HOST);
  ASSERT_EQ(api()->kv_set(ctx(), "engine.key", "a", 1), DSCORE_OK);
  char buffer[4];
  size_t size = 0;
  EXPECT_EQ(api()->kv_get(other.handle(), "engine.key", buffer, sizeof buffer, &size, 0),
            DSCORE_DEADLINE_EXCEEDED);
  dscore_communicator comm{sizeof(dscore_communicator), 0, 1, nullptr, nullptr};
  host_.set_communicator(DSCORE_GROUP_WORLD, &comm);
  EXPECT_EQ(api()->communicator(other.handle(), DSCORE_GROUP_WORLD), nullptr);
  EXPECT_EQ(host_.take_error()->second, "mine");
}

TEST_F(HostApi, ContextsGivenOneStoreShareIt) {
  auto store = make_in_process_kv();
  HostContext a(store), b(store);
  ASSERT_EQ(api()->kv_set(a.handle(), "job.key", "xy", 2), DSCORE_OK);
  char buffer[4];
  size_t size = 0;
  ASSERT_EQ(api()->kv_get(b.handle(), "job.key", buffer, sizeof buffer, &size, 0), DSCORE_OK);
  EXPECT_EQ(std::string(buffer, size), "xy");
}

TEST_F(HostApi, KeyValueStoreRoundTripsAndTruncatesToCapacity) {
  const char value[] = "nccl-unique-id-bytes";
  ASSERT_EQ(api()->kv_set(ctx(), "hostapi.id", value, sizeof value), DSCORE_OK);
  char small[4];
  size_t size = 0;
  ASSERT_EQ(api()->kv_get(ctx(), "hostapi.id", small, sizeof small, &size, 0), DSCORE_OK);
  EXPECT_EQ(size, sizeof value);  // the full size, for a retry with a bigger buffer
  EXPECT_EQ(std::memcmp(small, "nccl", 4), 0);
  char big[64];
  ASSERT_EQ(api()->kv_get(ctx(), "hostapi.id", big, sizeof big, &size, 0), DSCORE_OK);
  EXPECT_STREQ(big, value);
}

TEST_F(HostApi, KeyValueGetTimesOutWithAMessageNamingTheKey) {
  char buffer[8];
  size_t size = 0;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(api()->kv_get(ctx(), "hostapi.never", buffer, sizeof buffer, &size, 100),
            DSCORE_DEADLINE_EXCEEDED);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(5));
  auto error = host_.take_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->first, DSCORE_DEADLINE_EXCEEDED);
  EXPECT_EQ(error->second, "kv_get: key 'hostapi.never' was not published within 100 ms");
}

TEST_F(HostApi, KeyValueGetWaitsForAKeyPublishedLater) {
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    api()->kv_set(ctx(), "hostapi.later", "v", 1);
  });
  char buffer[8];
  size_t size = 0;
  EXPECT_EQ(api()->kv_get(ctx(), "hostapi.later", buffer, sizeof buffer, &size, 10000), DSCORE_OK);
  EXPECT_EQ(size, 1u);
  publisher.join();
}

TEST_F(HostApi, KeyValueBackendIsTheContexts) {
  struct Recording : KvBackend {
    std::string last_key;
    Status set(const std::string& key, std::string) override {
      last_key = key;
      return Status(DSCORE_UNAVAILABLE, "job has no store");
    }
    Result<std::string> get(const std::string&, int64_t) override {
      return Status(DSCORE_UNAVAILABLE, "job has no store");
    }
  };
  auto backend = std::make_shared<Recording>();
  HostContext host(backend);
  EXPECT_EQ(api()->kv_set(host.handle(), "hostapi.k", "v", 1), DSCORE_UNAVAILABLE);
  EXPECT_EQ(backend->last_key, "hostapi.k");
  EXPECT_EQ(api()->kv_set(nullptr, "hostapi.k", "v", 1), DSCORE_UNAVAILABLE);  // no context, no job
}

TEST_F(HostApi, AllocationsAreCountedUnderTheirTagInTheContextsLedger) {
  void* p = api()->alloc(ctx(), 1000, 256, DSCORE_MEMORY_HOST, "hostapi_test");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(host_.memory().by_tag()["hostapi_test"], 1000u);
  api()->free(ctx(), p, DSCORE_MEMORY_HOST);
  EXPECT_EQ(host_.memory().by_tag()["hostapi_test"], 0u);
  api()->free(ctx(), nullptr, DSCORE_MEMORY_HOST);  // a no-op
}

TEST_F(HostApi, FailedAllocationRecordsResourceExhausted) {
  EXPECT_EQ(api()->alloc(ctx(), 64, 3, DSCORE_MEMORY_HOST, "bad_alignment"), nullptr);
  auto error = host_.take_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->first, DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(error->second.find("64 bytes of host memory"), std::string::npos) << error->second;
  EXPECT_EQ(api()->alloc(ctx(), 64, 0, DSCORE_MEMORY_DEVICE, "device"), nullptr);
  EXPECT_EQ(host_.take_error()->first, DSCORE_UNIMPLEMENTED);
}

// Device memory comes from the engine's device when it is a CUDA device; a
// context whose engine computes on the CPU refuses it, saying why.
TEST_F(HostApi, DeviceMemoryOnACpuDeviceIsRefusedNamingTheDevice) {
  device::CpuDevice cpu(device::CpuStreams::kSynchronous);
  host_.set_device(&cpu);
  EXPECT_EQ(api()->alloc(ctx(), 64, 0, DSCORE_MEMORY_DEVICE, "device"), nullptr);
  auto error = host_.take_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->first, DSCORE_UNIMPLEMENTED);
  EXPECT_NE(error->second.find("computes on the CPU"), std::string::npos) << error->second;
  host_.set_device(nullptr);
}

#ifdef DSCORE_TEST_WITH_CUDA
TEST_F(HostApi, DeviceMemoryComesFromTheCudaDeviceAndIsFreedThroughTheContext) {
  if (device::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto gpu = device::open_cuda_device(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  host_.set_device(gpu->get());
  const uint64_t before = memory_usage(DSCORE_MEMORY_DEVICE).current_bytes;
  void* p = api()->alloc(ctx(), 1 << 20, 256, DSCORE_MEMORY_DEVICE, "hostapi device");
  ASSERT_NE(p, nullptr) << host_.take_error()->second;
  EXPECT_EQ(memory_usage(DSCORE_MEMORY_DEVICE).current_bytes, before + (1u << 20));
  EXPECT_EQ(api()->alloc(ctx(), 64, 4096, DSCORE_MEMORY_DEVICE, "over-aligned"), nullptr);
  EXPECT_EQ(host_.take_error()->first, DSCORE_INVALID_ARGUMENT);
  api()->free(ctx(), p, DSCORE_MEMORY_DEVICE);
  EXPECT_EQ(memory_usage(DSCORE_MEMORY_DEVICE).current_bytes, before);
  host_.set_device(nullptr);
}
#endif

TEST_F(HostApi, RangesNestPerThreadAndAnUnmatchedPopIsHarmless) {
  ASSERT_EQ(host_.range_depth(), 0u);
  api()->range_push(ctx(), "outer");
  api()->range_push(ctx(), "inner");
  EXPECT_EQ(host_.range_depth(), 2u);
  std::thread([&] { EXPECT_EQ(host_.range_depth(), 0u); }).join();
  api()->range_pop(ctx());
  api()->range_pop(ctx());
  EXPECT_EQ(host_.range_depth(), 0u);
  api()->range_pop(ctx());
  EXPECT_EQ(host_.range_depth(), 0u);
}

TEST_F(HostApi, CommunicatorGroupsAreNullUntilTheEngineInstallsThem) {
  EXPECT_EQ(api()->communicator(ctx(), DSCORE_GROUP_WORLD), nullptr);
  dscore_communicator world{sizeof(dscore_communicator), 0, 4, nullptr, nullptr};
  dscore_communicator dp{sizeof(dscore_communicator), 0, 2, nullptr, nullptr};
  host_.set_communicator(DSCORE_GROUP_WORLD, &world);
  host_.set_communicator(DSCORE_GROUP_DATA_PARALLEL, &dp);
  EXPECT_EQ(api()->communicator(ctx(), DSCORE_GROUP_WORLD), &world);
  EXPECT_EQ(api()->communicator(ctx(), DSCORE_GROUP_DATA_PARALLEL), &dp);
  EXPECT_EQ(api()->communicator(ctx(), 77), nullptr);  // a group this host does not form
  EXPECT_EQ(api()->communicator(nullptr, DSCORE_GROUP_WORLD), nullptr);
  host_.set_communicator(DSCORE_GROUP_WORLD, nullptr);
  EXPECT_EQ(api()->communicator(ctx(), DSCORE_GROUP_WORLD), nullptr);
}

TEST_F(HostApi, ClockIsMonotonic) {
  uint64_t a = api()->now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  uint64_t b = api()->now_ns();
  EXPECT_GE(b - a, 2000000u);
}

TEST_F(HostApi, LogLinesCarryThePluginName) {
  ::testing::internal::CaptureStderr();
  api()->log(ctx(), DSCORE_LOG_WARNING, "my_plugin", "disk almost full");
  api()->log(nullptr, DSCORE_LOG_INFO, nullptr, nullptr);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: my_plugin: disk almost full"), std::string::npos) << err;
}

}  // namespace
}  // namespace dscore::plugin_host
