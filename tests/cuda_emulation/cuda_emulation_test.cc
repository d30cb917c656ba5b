// The CPU emulation of CUDA (include/cuda_emulation.h) on the kernels of
// emulation_kernels.cu: what a correct kernel computes, in both thread
// orders; that a missing barrier, a barrier some thread never reaches, and
// dynamic shared memory above the limit cudaFuncSetAttribute set are caught;
// streams run apart from the caller, in order, after the events they wait for.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <dscore/cpp/dtype.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda_emulation.h"
#include "emulation_kernels.h"

namespace {

namespace emu = dscore::cuda_emulation;
namespace kernels = dscore::emulation_test;

class CudaEmulation : public ::testing::TestWithParam<emu::Schedule> {
 protected:
  void SetUp() override { emu::set_schedule(GetParam()); }
  void TearDown() override { emu::set_schedule(emu::Schedule::kAscending); }
};

TEST_P(CudaEmulation, ABarrierOrdersSharedMemory) {
  const int threads = 96;
  std::vector<float> in(threads), out(threads, 0.0f);
  for (int t = 0; t < threads; ++t) in[t] = static_cast<float>(t) + 0.5f;
  ASSERT_EQ(kernels::reverse_in_block(out.data(), in.data(), threads, true), cudaSuccess);
  for (int t = 0; t < threads; ++t) EXPECT_EQ(out[t], in[threads - 1 - t]) << "thread " << t;
}

// Without the barrier, the threads that run first read shared memory no
// thread has written yet (0xff bytes: NaN).
TEST_P(CudaEmulation, AMissingBarrierShows) {
  const int threads = 64;
  std::vector<float> in(threads, 1.0f), out(threads, 0.0f);
  ASSERT_EQ(kernels::reverse_in_block(out.data(), in.data(), threads, false), cudaSuccess);
  int unwritten = 0;
  for (float v : out) unwritten += std::isnan(v);
  EXPECT_GT(unwritten, 0);
}

TEST_P(CudaEmulation, ShufflesSumAWarp) {
  const int threads = 128;
  std::vector<float> in(threads), out(threads / 32, 0.0f);
  for (int t = 0; t < threads; ++t) in[t] = static_cast<float>(t);
  ASSERT_EQ(kernels::warp_sums(out.data(), in.data(), threads), cudaSuccess);
  for (int w = 0; w < threads / 32; ++w) {
    float expected = 0;
    for (int l = 0; l < 32; ++l) expected += static_cast<float>(w * 32 + l);
    EXPECT_EQ(out[w], expected) << "warp " << w;
  }
}

// b is column-major: element (k, n) at n * 16 + k.
TEST_P(CudaEmulation, WmmaMultipliesATile) {
  std::vector<uint16_t> a(256), b(256);
  std::vector<float> af(256), bf(256), c(256, 0.0f);
  for (int i = 0; i < 256; ++i) {
    a[i] = dscore::sdk::float_to_bf16(static_cast<float>(i % 7) - 3.0f);
    b[i] = dscore::sdk::float_to_bf16(static_cast<float>(i % 5) * 0.5f);
    af[i] = dscore::sdk::bf16_to_float(a[i]);
    bf[i] = dscore::sdk::bf16_to_float(b[i]);
  }
  ASSERT_EQ(kernels::tile_product(c.data(), reinterpret_cast<const __nv_bfloat16*>(a.data()),
                                  reinterpret_cast<const __nv_bfloat16*>(b.data())),
            cudaSuccess);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float expected = 0;
      for (int k = 0; k < 16; ++k) expected += af[m * 16 + k] * bf[n * 16 + k];
      EXPECT_EQ(c[m * 16 + n], expected) << "(" << m << ", " << n << ")";
    }
}

TEST_P(CudaEmulation, DynamicSharedMemoryStaysWithinTheLimitSet) {
  std::vector<float> out(64, -1.0f);
  EXPECT_EQ(kernels::dynamic_shared(out.data(), 96 << 10, 64 << 10), cudaErrorInvalidValue);
  EXPECT_EQ(out[5], -1.0f) << "the launch ran";
  ASSERT_EQ(kernels::dynamic_shared(out.data(), 64 << 10, 64 << 10), cudaSuccess);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], static_cast<float>(t));
}

TEST_P(CudaEmulation, ABarrierAThreadSkipsEndsTheRun) {
  std::vector<float> out(64, 0.0f);
  try {
    kernels::early_exit(out.data(), 64);
    FAIL() << "the launch returned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("thread 0 exited"), std::string::npos) << e.what();
  }
}

// A created stream runs its work apart from the caller: work behind a held
// host function has not run, an event orders another stream after it, and
// a copy to pageable memory waits for its stream, as cudart's does.
struct Gate {
  std::atomic<bool> open{false};
  static void hold(void* gate) {
    while (!static_cast<Gate*>(gate)->open)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

TEST(CudaEmulationStreams, WorkRunsOnTheStreamInOrderAfterItsEvents) {
  cudaStream_t held = nullptr, other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  unsigned char *device = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 64), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 64), cudaSuccess);
  ASSERT_EQ(cudaMemset(device, 0, 64), cudaSuccess);
  Gate gate;
  cudaEvent_t written = nullptr;
  ASSERT_EQ(cudaEventCreate(&written), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(held, Gate::hold, &gate), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 7, 64, held), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(written, held), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, written, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, device, 64, cudaMemcpyDeviceToHost, other), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(held), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(written), cudaErrorNotReady);
  EXPECT_EQ(device[0], 0) << "the memset ran before the host function let it";
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(written), cudaSuccess);
  EXPECT_EQ(pinned[0], 7);
  EXPECT_EQ(pinned[63], 7);
  // A pageable destination: the copy waits for the stream's earlier work.
  Gate second;
  ASSERT_EQ(cudaLaunchHostFunc(held, Gate::hold, &second), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 9, 64, held), cudaSuccess);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    second.open = true;
  });
  std::vector<unsigned char> pageable(64, 0);
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), device, 64, cudaMemcpyDeviceToHost, held),
            cudaSuccess);
  EXPECT_EQ(pageable[0], 9) << "the pageable copy returned before its stream's work";
  opener.join();
  cudaEventDestroy(written);
  cudaFreeHost(pinned);
  cudaFree(device);
  cudaStreamDestroy(other);
  cudaStreamDestroy(held);
}

// A device's memory is DSCORE_CUDA_EMULATION_MEMORY bytes: cudaMemGetInfo
// says what is left, and an allocation past it fails as on a full GPU
// (cudaErrorMemoryAllocation, also from cudaGetLastError); pinned host
// memory does not count.
TEST(CudaEmulationMemory, DeviceAllocationsPastTheDevicesMemoryFail) {
  ::setenv("DSCORE_CUDA_EMULATION_MEMORY", "1048576", 1);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total, 1048576u);
  void *a = nullptr, *b = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 600000), cudaSuccess);
  size_t after = 0;
  ASSERT_EQ(cudaMemGetInfo(&after, &total), cudaSuccess);
  EXPECT_LE(after + 600000, free_bytes);
  EXPECT_EQ(cudaMalloc(&b, 600000), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMallocHost(&pinned, 600000), cudaSuccess) << "pinned host memory does not count";
  ASSERT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&b, 600000), cudaSuccess) << "freed memory is free again";
  cudaFree(b);
  cudaFreeHost(pinned);
  ::unsetenv("DSCORE_CUDA_EMULATION_MEMORY");
}

// A stream-ordered allocation is valid from its stream's point on: work on
// another stream that writes it without waiting for that point has its
// bytes overwritten with 0xFF (NaN) when the stream gets there; work
// ordered after it by an event keeps them.
TEST(CudaEmulationStreams, AStreamOrderedAllocationIsPoisonedAtItsStreamsPoint) {
  cudaStream_t held = nullptr, other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 64), cudaSuccess);
  Gate gate;
  ASSERT_EQ(cudaLaunchHostFunc(held, Gate::hold, &gate), cudaSuccess);
  void *unordered = nullptr, *ordered = nullptr;
  ASSERT_EQ(cudaMallocAsync(&unordered, 64, held), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&ordered, 64, held), cudaSuccess);
  cudaEvent_t allocated = nullptr;
  ASSERT_EQ(cudaEventCreate(&allocated), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(allocated, held), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(unordered, 7, 64, other), cudaSuccess);  // no wait: misuse
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, allocated, 0), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(ordered, 7, 64, other), cudaSuccess);
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(held), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pinned, unordered, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(pinned[0], 0xFF) << "a write before the allocation's point survived";
  EXPECT_EQ(pinned[63], 0xFF);
  ASSERT_EQ(cudaMemcpy(pinned, ordered, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(pinned[0], 7);
  EXPECT_EQ(pinned[63], 7);
  cudaEventDestroy(allocated);
  cudaFreeAsync(unordered, held);
  cudaFreeAsync(ordered, held);
  cudaStreamSynchronize(held);
  cudaFreeHost(pinned);
  cudaStreamDestroy(other);
  cudaStreamDestroy(held);
}

// A wait is for the record it followed: recording the event again, on a
// stream that reaches it at once, does not release the earlier wait.
TEST(CudaEmulationStreams, AWaitFollowsItsRecordNotALaterOne) {
  cudaStream_t held = nullptr, waiting = nullptr, idle = nullptr;
  for (cudaStream_t* s : {&held, &waiting, &idle})
    ASSERT_EQ(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 8), cudaSuccess);
  ASSERT_EQ(cudaMemset(device, 0, 8), cudaSuccess);
  Gate gate;
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(held, Gate::hold, &gate), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, held), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(waiting, event, 0), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 5, 8, waiting), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, idle), cudaSuccess);  // reached at once
  ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(device[0], 0) << "the wait ended with the later record";
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(waiting), cudaSuccess);
  EXPECT_EQ(device[0], 5);
  cudaEventDestroy(event);
  cudaFree(device);
  for (cudaStream_t s : {held, waiting, idle}) cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Orders, CudaEmulation,
                         ::testing::Values(emu::Schedule::kAscending, emu::Schedule::kDescending),
                         [](const auto& info) {
                           return info.param == emu::Schedule::kAscending ? "Ascending"
                                                                          : "Descending";
                         });

}  // namespace
