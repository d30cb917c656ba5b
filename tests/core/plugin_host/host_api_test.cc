// The host services table (core/plugin_host/host_api.cc) as a plugin sees
// it: thread-local errors, the key-value store with its timeout, counted
// memory, profiling ranges, the communicator provider, logging.
#include "core/plugin_host/host_api.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/base/memory.h"

namespace dscore::plugin_host {
namespace {

const dscore_host_api* api() { return host_api(); }

TEST(HostApi, DescribesItsVersion) {
  EXPECT_EQ(api()->struct_size, sizeof(dscore_host_api));
  EXPECT_EQ(api()->abi_major, 1u);
  EXPECT_EQ(api()->abi_minor, static_cast<uint32_t>(DSCORE_ABI_VERSION_MINOR));
  ASSERT_NE(api()->host_version, nullptr);
  EXPECT_STRNE(api()->host_version, "");
  EXPECT_STRNE(api()->host_version, "unknown");
}

TEST(HostApi, SetErrorIsPerThreadAndReturnsTheCode) {
  clear_last_error();
  EXPECT_EQ(api()->set_error(DSCORE_INVALID_ARGUMENT, "main thread"), DSCORE_INVALID_ARGUMENT);
  std::optional<std::pair<dscore_status, std::string>> other;
  std::thread t([&] {
    EXPECT_FALSE(take_last_error());  // the main thread's error is not visible here
    api()->set_error(DSCORE_INTERNAL, "other thread");
    other = take_last_error();
  });
  t.join();
  ASSERT_TRUE(other);
  EXPECT_EQ(other->first, DSCORE_INTERNAL);
  EXPECT_EQ(other->second, "other thread");
  auto mine = take_last_error();
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->first, DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(mine->second, "main thread");
  EXPECT_FALSE(take_last_error());  // taken means cleared
  api()->set_error(DSCORE_NOT_FOUND, nullptr);
  EXPECT_EQ(take_last_error()->second, "");
}

TEST(HostApi, KeyValueStoreRoundTripsAndTruncatesToCapacity) {
  const char value[] = "nccl-unique-id-bytes";
  ASSERT_EQ(api()->kv_set("hostapi.id", value, sizeof value), DSCORE_OK);
  char small[4];
  size_t size = 0;
  ASSERT_EQ(api()->kv_get("hostapi.id", small, sizeof small, &size, 0), DSCORE_OK);
  EXPECT_EQ(size, sizeof value);  // the full size, for a retry with a bigger buffer
  EXPECT_EQ(std::memcmp(small, "nccl", 4), 0);
  char big[64];
  ASSERT_EQ(api()->kv_get("hostapi.id", big, sizeof big, &size, 0), DSCORE_OK);
  EXPECT_STREQ(big, value);
}

TEST(HostApi, KeyValueGetTimesOutWithAMessageNamingTheKey) {
  clear_last_error();
  char buffer[8];
  size_t size = 0;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(api()->kv_get("hostapi.never", buffer, sizeof buffer, &size, 100), DSCORE_DEADLINE_EXCEEDED);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(5));
  auto error = take_last_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->first, DSCORE_DEADLINE_EXCEEDED);
  EXPECT_EQ(error->second, "kv_get: key 'hostapi.never' was not published within 100 ms");
}

TEST(HostApi, KeyValueGetWaitsForAKeyPublishedLater) {
  std::thread publisher([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    api()->kv_set("hostapi.later", "v", 1);
  });
  char buffer[8];
  size_t size = 0;
  EXPECT_EQ(api()->kv_get("hostapi.later", buffer, sizeof buffer, &size, 10000), DSCORE_OK);
  EXPECT_EQ(size, 1u);
  publisher.join();
}

TEST(HostApi, KeyValueBackendCanBeReplaced) {
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
  set_kv_backend(backend);
  EXPECT_EQ(api()->kv_set("hostapi.k", "v", 1), DSCORE_UNAVAILABLE);
  EXPECT_EQ(backend->last_key, "hostapi.k");
  set_kv_backend(nullptr);
  EXPECT_EQ(api()->kv_set("hostapi.k", "v", 1), DSCORE_OK);
  take_last_error();
}

TEST(HostApi, AllocationsAreCountedUnderTheirTag) {
  const uint64_t before = memory_by_tag()["hostapi_test"];
  void* p = api()->alloc(1000, 256, DSCORE_MEMORY_HOST, "hostapi_test");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(memory_by_tag()["hostapi_test"], before + 1000);
  api()->free(p, DSCORE_MEMORY_HOST);
  EXPECT_EQ(memory_by_tag()["hostapi_test"], before);
  api()->free(nullptr, DSCORE_MEMORY_HOST);  // a no-op
}

TEST(HostApi, FailedAllocationRecordsResourceExhausted) {
  clear_last_error();
  EXPECT_EQ(api()->alloc(64, 3, DSCORE_MEMORY_HOST, "bad_alignment"), nullptr);
  auto error = take_last_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->first, DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(error->second.find("64 bytes of host memory"), std::string::npos) << error->second;
}

TEST(HostApi, RangesNestPerThreadAndAnUnmatchedPopIsHarmless) {
  const size_t depth = range_depth();
  ASSERT_EQ(depth, 0u);
  api()->range_push("outer");
  api()->range_push("inner");
  EXPECT_EQ(range_depth(), depth + 2);
  api()->range_pop();
  api()->range_pop();
  EXPECT_EQ(range_depth(), depth);
  api()->range_pop();
  EXPECT_EQ(range_depth(), 0u);
}

TEST(HostApi, CommunicatorIsNullUntilTheEngineInstallsOne) {
  EXPECT_EQ(api()->communicator(), nullptr);
  dscore_communicator comm{sizeof(dscore_communicator), 0, 1, nullptr, nullptr};
  set_communicator(&comm);
  EXPECT_EQ(api()->communicator(), &comm);
  set_communicator(nullptr);
  EXPECT_EQ(api()->communicator(), nullptr);
}

TEST(HostApi, ClockIsMonotonic) {
  uint64_t a = api()->now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  uint64_t b = api()->now_ns();
  EXPECT_GE(b - a, 2000000u);
}

TEST(HostApi, LogLinesCarryThePluginName) {
  ::testing::internal::CaptureStderr();
  api()->log(DSCORE_LOG_WARNING, "my_plugin", "disk almost full");
  api()->log(DSCORE_LOG_INFO, nullptr, nullptr);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: my_plugin: disk almost full"), std::string::npos) << err;
}

}  // namespace
}  // namespace dscore::plugin_host
