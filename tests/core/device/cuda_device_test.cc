// The CUDA device (core/device/cuda_device.h): the ordering tests of the CPU
// device on CUDA streams, sticky failures (a task's status, an error left by
// a CUDA call), blocked time, copies, counted allocations and pool reuse.
// A producer is made late by a host function blocking the stream on a Gate
// (cudaLaunchHostFunc), so a consumer that runs too early is caught
// deterministically. Label `gpu`: skipped (GTEST_SKIP) where no CUDA device
// is visible.
#include "core/device/cuda_device.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/device/gate.h"

namespace dscore::device {
namespace {

using testing::Gate;
using namespace std::chrono_literals;

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    auto d = open_cuda_device(0);
    ASSERT_TRUE(d.ok()) << d.status().message();
    device_ = std::move(d).value();
  }
  std::unique_ptr<Stream> stream(std::string name) {
    auto s = device_->create_stream(std::move(name));
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(s).value();
  }
  Buffer buffer(size_t bytes, Placement placement, std::string_view name) {
    auto b = device_->allocate(bytes, placement, MemoryUse::kOther, name);
    EXPECT_TRUE(b.ok()) << b.status().message();
    return std::move(b).value();
  }
  // Holds `s` at `gate`: work enqueued on it after this waits for open().
  static void hold(Stream& s, Gate& gate) {
    s.enqueue([&s, &gate] {
      cudaError_t err = cudaLaunchHostFunc(
          static_cast<cudaStream_t>(s.native()), [](void* g) { static_cast<Gate*>(g)->pass(); },
          &gate);
      return err == cudaSuccess ? Status::Ok() : internal_error(cudaGetErrorString(err));
    });
  }
  static void set_bytes(Stream& s, void* dst, int value, size_t bytes) {
    s.enqueue([&s, dst, value, bytes] {
      cudaError_t err = cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(s.native()));
      return err == cudaSuccess ? Status::Ok() : internal_error(cudaGetErrorString(err));
    });
  }
  uint8_t first_byte(const Buffer& device_buffer) {
    uint8_t out = 0xee;
    EXPECT_EQ(cudaMemcpy(&out, device_buffer.data(), 1, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

  std::unique_ptr<Device> device_;
};

TEST_F(CudaDeviceTest, DescribesItself) {
  EXPECT_EQ(device_->type(), DeviceType::kCuda);
  EXPECT_EQ(device_->index(), 0);
  EXPECT_EQ(device_->tensor_device_type(), DSCORE_DEVICE_CUDA);
  const std::string text = device_->describe();
  EXPECT_EQ(text.rfind("cuda:0 (", 0), 0u) << text;
  EXPECT_NE(text.find(" GiB)"), std::string::npos) << text;
  auto s = stream("compute");
  EXPECT_EQ(s->name(), "compute");
  EXPECT_NE(s->native(), nullptr);
}

TEST_F(CudaDeviceTest, AMissingOrdinalIsAFailedPrecondition) {
  auto r = open_cuda_device(cuda_device_count());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_NE(r.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos);
}

TEST_F(CudaDeviceTest, WorkAfterWaitSeesTheOtherStreamsWrites) {
  auto producer = stream("producer");
  auto consumer = stream("consumer");
  Buffer x = buffer(4, Placement::kDevice, "x");
  Buffer seen = buffer(4, Placement::kPinned, "seen");
  Gate gate;
  hold(*producer, gate);
  set_bytes(*producer, x.data(), 7, 4);
  consumer->wait(producer->record());
  device_->copy(seen.data(), x.data(), 4, *consumer);
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(consumer->record()->done()) << "the consumer ran before the producer's event";
  gate.open();
  ASSERT_TRUE(consumer->synchronize().ok());
  EXPECT_EQ(static_cast<uint8_t*>(seen.data())[0], 7);
  EXPECT_EQ(static_cast<uint8_t*>(seen.data())[3], 7);
}

TEST_F(CudaDeviceTest, RecordWaitChainsAcrossThreeStreams) {
  auto a = stream("a");
  auto b = stream("b");
  auto c = stream("c");
  Buffer x = buffer(64, Placement::kDevice, "x");
  Buffer y = buffer(64, Placement::kDevice, "y");
  Buffer out = buffer(64, Placement::kPinned, "out");
  Gate gate;
  hold(*a, gate);
  set_bytes(*a, x.data(), 3, 64);
  b->wait(a->record());
  device_->copy(y.data(), x.data(), 64, *b);
  c->wait(b->record());
  device_->copy(out.data(), y.data(), 64, *c);
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(c->record()->done());
  gate.open();
  ASSERT_TRUE(c->synchronize().ok());
  for (int i = 0; i < 64; ++i) ASSERT_EQ(static_cast<uint8_t*>(out.data())[i], 3) << i;
}

TEST_F(CudaDeviceTest, AMissingWaitIsExposed) {
  auto producer = stream("producer");
  auto consumer = stream("consumer");
  Buffer x = buffer(4, Placement::kDevice, "x");  // zeroed
  Buffer seen = buffer(4, Placement::kPinned, "seen");
  Gate gate;
  hold(*producer, gate);
  set_bytes(*producer, x.data(), 9, 4);
  EventPtr written = producer->record();  // the consumer forgets to wait on it
  device_->copy(seen.data(), x.data(), 4, *consumer);
  ASSERT_TRUE(consumer->synchronize().ok());
  gate.open();
  ASSERT_TRUE(written->wait().ok());
  EXPECT_EQ(static_cast<uint8_t*>(seen.data())[0], 0) << "the consumer read before the write";
  EXPECT_EQ(first_byte(x), 9);
}

TEST_F(CudaDeviceTest, AFailureIsStickyAndReachesAWaiter) {
  auto producer = stream("comm");
  auto consumer = stream("compute");
  bool ran_after = false;
  EventPtr before = producer->record();
  producer->enqueue([] { return Status(DSCORE_DEADLINE_EXCEEDED, "allreduce timed out"); });
  producer->enqueue([&] {
    ran_after = true;
    return Status::Ok();
  });
  EXPECT_EQ(producer->synchronize().message(), "allreduce timed out");
  EXPECT_FALSE(ran_after);
  EXPECT_TRUE(before->wait().ok());
  EventPtr failed = producer->record();
  EXPECT_EQ(failed->wait().code(), DSCORE_DEADLINE_EXCEEDED);
  consumer->wait(failed);
  consumer->enqueue([&] {
    ran_after = true;
    return Status::Ok();
  });
  EXPECT_EQ(consumer->synchronize().code(), DSCORE_DEADLINE_EXCEEDED);
  EXPECT_FALSE(ran_after);
}

TEST_F(CudaDeviceTest, AnErrorLeftByACudaCallFailsTheStream) {
  auto s = stream("careless");
  Buffer x = buffer(16, Placement::kDevice, "x");
  s->enqueue([&] {
    // An invalid direction fails at once and sets the thread's last error;
    // the task ignores the return value.
    (void)cudaMemcpyAsync(x.data(), x.data(), 16, static_cast<cudaMemcpyKind>(42),
                          static_cast<cudaStream_t>(s->native()));
    return Status::Ok();
  });
  Status st = s->synchronize();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cudaGetLastError"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("\"careless\""), std::string::npos) << st.message();
  // The error was cleared: another stream works.
  auto fine = stream("fine");
  device_->fill_zero(x.data(), 16, *fine);
  EXPECT_TRUE(fine->synchronize().ok());
}

TEST_F(CudaDeviceTest, AThrowingTaskBecomesInternalNamingTheStream) {
  auto s = stream("gradient copy");
  s->enqueue([]() -> Status { throw std::runtime_error("index 7 out of range"); });
  Status st = s->synchronize();
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_NE(st.message().find("\"gradient copy\""), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("index 7 out of range"), std::string::npos) << st.message();
}

TEST_F(CudaDeviceTest, DestructionFinishesQueuedWork) {
  Buffer x = buffer(4, Placement::kDevice, "x");
  Gate gate;
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.open();
  });
  {
    auto s = stream("doomed");
    hold(*s, gate);
    set_bytes(*s, x.data(), 5, 4);
  }
  opener.join();
  EXPECT_EQ(first_byte(x), 5);
}

TEST_F(CudaDeviceTest, BlockedTimeCountsSynchronizeAndEventWaits) {
  auto s = stream("slow");
  Gate gate;
  std::thread opener([&] {
    std::this_thread::sleep_for(30ms);
    gate.open();
  });
  hold(*s, gate);
  ASSERT_TRUE(s->synchronize().ok());
  opener.join();
  EXPECT_GE(s->blocked_ns(), 20'000'000);

  Gate gate2;
  std::thread opener2([&] {
    std::this_thread::sleep_for(30ms);
    gate2.open();
  });
  hold(*s, gate2);
  const int64_t before = s->blocked_ns();
  ASSERT_TRUE(s->record()->wait().ok());
  opener2.join();
  EXPECT_GE(s->blocked_ns() - before, 20'000'000);
}

TEST_F(CudaDeviceTest, CopyAndFillZeroBetweenPlacements) {
  auto s = stream("copy");
  Buffer host = buffer(256, Placement::kHost, "host");
  Buffer pinned = buffer(256, Placement::kPinned, "pinned");
  Buffer dev = buffer(256, Placement::kDevice, "device");
  auto* in = static_cast<uint8_t*>(host.data());
  for (int i = 0; i < 256; ++i) in[i] = static_cast<uint8_t>(i + 1);
  device_->copy(dev.data(), host.data(), 256, *s);
  device_->fill_zero(static_cast<uint8_t*>(dev.data()) + 64, 32, *s);
  device_->copy(pinned.data(), dev.data(), 256, *s);
  ASSERT_TRUE(s->synchronize().ok());
  const auto* out = static_cast<const uint8_t*>(pinned.data());
  for (int i = 0; i < 256; ++i) {
    const int expect = (i >= 64 && i < 96) ? 0 : i + 1;
    ASSERT_EQ(out[i], static_cast<uint8_t>(expect)) << "byte " << i;
  }
}

TEST_F(CudaDeviceTest, AllocationsAreCountedByKindAndUse) {
  const auto master = static_cast<size_t>(MemoryUse::kMaster);
  const uint64_t device_before = memory_usage(DSCORE_MEMORY_DEVICE).current_bytes;
  const uint64_t pinned_before = memory_usage(DSCORE_MEMORY_PINNED).current_bytes;
  const uint64_t master_before = memory_by_use()[master];
  {
    auto d = device_->allocate(1 << 20, Placement::kDevice, MemoryUse::kMaster, "fp32 master");
    auto p = device_->allocate(4096, Placement::kPinned, MemoryUse::kMaster, "master staging");
    ASSERT_TRUE(d.ok() && p.ok());
    EXPECT_EQ(memory_usage(DSCORE_MEMORY_DEVICE).current_bytes - device_before, 1u << 20);
    EXPECT_EQ(memory_usage(DSCORE_MEMORY_PINNED).current_bytes - pinned_before, 4096u);
    EXPECT_EQ(memory_by_use()[master] - master_before, (1u << 20) + 4096u);
    EXPECT_EQ(memory_by_tag()["fp32 master"], 1u << 20);
    std::vector<uint8_t> back(1 << 20, 0xff);
    ASSERT_EQ(cudaMemcpy(back.data(), d->data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], 0) << "zero-filled, byte " << i;
  }
  EXPECT_EQ(memory_usage(DSCORE_MEMORY_DEVICE).current_bytes, device_before);
  EXPECT_EQ(memory_usage(DSCORE_MEMORY_PINNED).current_bytes, pinned_before);
  EXPECT_EQ(memory_by_use()[master], master_before);
}

TEST_F(CudaDeviceTest, AnAbsurdAllocationFailsNamingTheBuffer) {
  auto r = device_->allocate(size_t{1} << 60, Placement::kDevice, MemoryUse::kActivations,
                             "activation stash");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(r.status().message().find("activation stash"), std::string::npos)
      << r.status().message();
  // The device still works.
  Buffer x = buffer(16, Placement::kDevice, "after");
  EXPECT_TRUE(x);
}

TEST_F(CudaDeviceTest, FreedDeviceMemoryIsReused) {
  // The CUDA emulation (tests/cuda_emulation) keeps no pool: a block goes
  // back when its stream reaches the free, so whether the second buffer
  // finds the first's memory still counted depends on that stream's timing.
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, device_->index()), cudaSuccess);
  if (std::string(prop.name).find("emulation") != std::string::npos)
    GTEST_SKIP() << "the CUDA emulation has no memory pool to reuse blocks from";
  constexpr size_t kBytes = size_t{256} << 20;
  const MemoryUsage before = memory_usage(DSCORE_MEMORY_DEVICE);
  size_t free_after_release = 0, free_after_second = 0, total = 0;
  {
    Buffer first = buffer(kBytes, Placement::kDevice, "first");
    ASSERT_TRUE(first);
  }
  ASSERT_EQ(cudaMemGetInfo(&free_after_release, &total), cudaSuccess);
  {
    Buffer second = buffer(kBytes, Placement::kDevice, "second");
    ASSERT_TRUE(second);
    ASSERT_EQ(cudaMemGetInfo(&free_after_second, &total), cudaSuccess);
  }
  // The pool kept the first block and handed it out again: the device's
  // free memory did not drop by the second buffer's size (a few MiB of
  // slack for what the driver may take lazily meanwhile).
  EXPECT_GE(free_after_second + (size_t{8} << 20), free_after_release)
      << "free memory dropped from " << free_after_release << " to " << free_after_second;
  const MemoryUsage after = memory_usage(DSCORE_MEMORY_DEVICE);
  EXPECT_LE(after.peak_bytes, std::max(before.peak_bytes, before.current_bytes + kBytes))
      << "the ledger held both buffers at once";
}

}  // namespace
}  // namespace dscore::device
