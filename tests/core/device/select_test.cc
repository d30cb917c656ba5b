// Device selection (core/device/select.h): "auto", "cpu" and "cuda" with and
// without a visible GPU, and DSCORE_CPU_STREAMS. The cases that need a GPU
// skip where none is visible; those that need none skip where one is.
#include "core/device/select.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#ifdef DSCORE_TEST_WITH_CUDA
#include "core/device/cuda_device.h"
#endif

namespace dscore::device {
namespace {

int gpus() {
#ifdef DSCORE_TEST_WITH_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A variable's value as the program reads it (engine/environment.h).
std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

TEST(CpuStreamsFromEnv, DefaultsToAsynchronous) {
  ScopedEnv env("DSCORE_CPU_STREAMS", nullptr);
  auto r = cpu_streams_named(variable("DSCORE_CPU_STREAMS"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, CpuStreams::kAsynchronous);
}

TEST(CpuStreamsFromEnv, ReadsSyncAndAsync) {
  {
    ScopedEnv env("DSCORE_CPU_STREAMS", "async");
    auto r = cpu_streams_named(variable("DSCORE_CPU_STREAMS"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, CpuStreams::kAsynchronous);
  }
  ScopedEnv env("DSCORE_CPU_STREAMS", "sync");
  auto r = cpu_streams_named(variable("DSCORE_CPU_STREAMS"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, CpuStreams::kSynchronous);
}

TEST(CpuStreamsFromEnv, ABadValueNamesTheVariableAndTheChoices) {
  ScopedEnv env("DSCORE_CPU_STREAMS", "threads");
  auto r = cpu_streams_named(variable("DSCORE_CPU_STREAMS"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_INVALID_ARGUMENT);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("DSCORE_CPU_STREAMS=\"threads\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"sync\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"async\""), std::string::npos) << m;
}

// DSCORE_CPU_DEVICE_MEMORY: shared unless "separate", which the device
// then reports (memory_is_host) and names; anything else is refused.
TEST(CpuMemoryFromEnv, SharedUnlessSeparate) {
  {
    ScopedEnv env("DSCORE_CPU_DEVICE_MEMORY", nullptr);
    auto r = cpu_memory_named(variable("DSCORE_CPU_DEVICE_MEMORY"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, CpuMemory::kShared);
  }
  ScopedEnv env("DSCORE_CPU_DEVICE_MEMORY", "separate");
  auto r = cpu_memory_named(variable("DSCORE_CPU_DEVICE_MEMORY"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, CpuMemory::kSeparate);
  auto device = select_device("cpu", 0, CpuStreams::kAsynchronous, *r);
  ASSERT_TRUE(device.ok());
  EXPECT_FALSE((*device)->memory_is_host());
  EXPECT_EQ((*device)->describe(), "cpu (asynchronous streams, device memory treated as separate)");
  EXPECT_TRUE(CpuDevice(CpuStreams::kSynchronous).memory_is_host());
}

TEST(CpuMemoryFromEnv, ABadValueNamesTheVariable) {
  ScopedEnv env("DSCORE_CPU_DEVICE_MEMORY", "discrete");
  auto r = cpu_memory_named(variable("DSCORE_CPU_DEVICE_MEMORY"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("DSCORE_CPU_DEVICE_MEMORY=\"discrete\""), std::string::npos)
      << r.status().message();
}

#ifdef DSCORE_TEST_WITH_CUDA
// A CUDA build on a machine without a driver or GPU (cudart is static):
// counting devices gives 0 and opening one says why, never crashing.
TEST(CudaDeviceWithoutAGpu, CountsZeroAndOpeningFailsClearly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int count = cuda_device_count();
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count, 0);
  EXPECT_EQ(out + err, "") << "cuda_device_count() printed";
  auto r = open_cuda_device(0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_FAILED_PRECONDITION);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("cuda:0 does not exist: no CUDA device is visible"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << m;
}
#endif

TEST(SelectDevice, CpuIsTheCpuDeviceWithTheStreamsAsked) {
  for (CpuStreams mode : {CpuStreams::kSynchronous, CpuStreams::kAsynchronous}) {
    auto r = select_device("cpu", 3, mode);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ((*r)->type(), DeviceType::kCpu);
    EXPECT_EQ(static_cast<CpuDevice&>(**r).streams(), mode);
  }
}

TEST(SelectDevice, AutoIsTheCpuWithoutAGpu) {
  if (gpus() > 0) GTEST_SKIP() << "a CUDA device is visible";
  auto r = select_device("auto", 0, CpuStreams::kAsynchronous);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->type(), DeviceType::kCpu);
  EXPECT_EQ((*r)->describe(), "cpu (asynchronous streams)");
}

TEST(SelectDevice, CudaWithoutAGpuSaysHowToFixIt) {
  if (gpus() > 0) GTEST_SKIP() << "a CUDA device is visible";
  auto r = select_device("cuda", 0, CpuStreams::kSynchronous);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_FAILED_PRECONDITION);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("\"device\": \"cuda\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"cpu\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"auto\""), std::string::npos) << m;
  if (built_with_cuda()) {
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << m;
    EXPECT_NE(m.find("driver"), std::string::npos) << m;
  } else {
    EXPECT_NE(m.find("built without CUDA (DSCORE_WITH_CUDA)"), std::string::npos) << m;
  }
}

TEST(SelectDevice, CudaWithNoVisibleDevicesFails) {
  if (!built_with_cuda()) GTEST_SKIP() << "built without CUDA";
  // With CUDA_VISIBLE_DEVICES empty the runtime sees no device, GPU or not,
  // provided it was not initialised before in this process.
  if (gpus() > 0) GTEST_SKIP() << "the CUDA runtime already saw a device";
  ScopedEnv env("CUDA_VISIBLE_DEVICES", "");
  auto r = select_device("cuda", 0, CpuStreams::kSynchronous);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CUDA_VISIBLE_DEVICES=\"\""), std::string::npos)
      << r.status().message();
}

TEST(SelectDevice, RejectsAnUnknownDeviceAndANegativeRank) {
  auto r = select_device("tpu", 0, CpuStreams::kSynchronous);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("\"device\": \"tpu\""), std::string::npos);
  auto n = select_device("cpu", -1, CpuStreams::kSynchronous);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), DSCORE_INVALID_ARGUMENT);
}

TEST(SelectDevice, AutoAndCudaTakeTheGpuOfTheLocalRank) {
  const int count = gpus();
  if (count == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
  for (const char* requested : {"auto", "cuda"}) {
    auto r = select_device(requested, count + 1, CpuStreams::kSynchronous);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ((*r)->type(), DeviceType::kCuda);
    EXPECT_EQ((*r)->index(), (count + 1) % count);
    EXPECT_EQ((*r)->describe().rfind("cuda:" + std::to_string((count + 1) % count) + " (", 0), 0u)
        << (*r)->describe();
  }
}

}  // namespace
}  // namespace dscore::device
