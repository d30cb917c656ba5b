// The CPU emulation of CUDA (include/cuda_emulation.h) on the kernels of
// emulation_kernels.cu: what a correct kernel computes, in both thread
// orders; that a missing barrier, a barrier some thread never reaches, and
// dynamic shared memory above the limit cudaFuncSetAttribute set are caught.
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <stdexcept>
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

INSTANTIATE_TEST_SUITE_P(Orders, CudaEmulation,
                         ::testing::Values(emu::Schedule::kAscending, emu::Schedule::kDescending),
                         [](const auto& info) {
                           return info.param == emu::Schedule::kAscending ? "Ascending"
                                                                          : "Descending";
                         });

}  // namespace
