// The llama model's CUDA kernels (plugins/models/llama/cuda) against its
// CPU kernels (cpu/kernels.h, the reference) with the same arguments, fp32,
// on random inputs; outputs that accumulate (+=) start from random values.
// Tolerance: max|cuda - cpu| <= 1e-5 * max|cpu| per output (summation order
// and the device's expf only). Label `gpu`: skipped (GTEST_SKIP) where no
// CUDA device is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cuda/llama_cuda_kernels.h"
#include "llama_config.h"
#include "rope.h"

namespace dscore::llama {
namespace {

using Floats = std::vector<float>;

Floats random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// A device copy of a host vector; download() reads it back.
class Device {
 public:
  explicit Device(const Floats& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), n_ * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), n_ * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~Device() { cudaFree(data_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  float* get() const { return data_; }
  Floats download() const {
    Floats out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, n_ * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  float* data_ = nullptr;
  size_t n_;
};

void expect_close(const Floats& want, const Floats& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_GT(scale, 0.0) << what;
  EXPECT_LE(worst, 1e-5 * scale) << what << ": max |cuda - cpu| " << worst << " of " << scale;
}

class LlamaCudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
  }
};

TEST_F(LlamaCudaKernels, RmsNormForwardAndBackward) {
  const int64_t N = 37, C = 72;
  const Floats x = random_floats(N * C, 1), w = random_floats(C, 2), dy = random_floats(N * C, 3);
  const Floats dx0 = random_floats(N * C, 4), dw0 = random_floats(C, 5);
  Floats out(N * C), rstd(N), dx = dx0, dw = dw0;
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  Device gx(x), gw(w), gdy(dy), gout{Floats(N * C)}, grstd{Floats(N)}, gdx(dx0), gdw(dw0);
  ASSERT_EQ(gpu::rmsnorm_forward(gout.get(), grstd.get(), gx.get(), gw.get(), N, C, 1e-6f, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::rmsnorm_backward_input(gdx.get(), gdy.get(), gx.get(), gw.get(), grstd.get(), N, C,
                                        nullptr),
            cudaSuccess);
  ASSERT_EQ(
      gpu::rmsnorm_backward_weight(gdw.get(), gdy.get(), gx.get(), grstd.get(), N, C, nullptr),
      cudaSuccess);
  expect_close(out, gout.download(), "out");
  expect_close(rstd, grstd.download(), "rstd");
  expect_close(dx, gdx.download(), "dinp (accumulated)");
  expect_close(dw, gdw.download(), "dweight (accumulated)");
}

TEST_F(LlamaCudaKernels, RopeForwardAndBackwardWithLlama3Scaling) {
  LlamaConfig c;
  c.head_dim = 8;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.original_max_position_embeddings = 16;
  const int64_t B = 2, T = 21, heads = 3, ld = heads * c.head_dim + 5;
  Floats cos(static_cast<size_t>(T * c.head_dim / 2)), sin(cos.size());
  rope_tables(cos.data(), sin.data(), rope_inv_freq(c), T);
  const Floats x = random_floats(B * T * ld, 6);
  Device gcos(cos), gsin(sin);
  for (bool transpose : {false, true}) {
    Floats want = x;
    if (transpose) {
      cpu::rope_backward(want.data(), cos.data(), sin.data(), B, T, heads, c.head_dim, ld);
    } else {
      cpu::rope_forward(want.data(), cos.data(), sin.data(), B, T, heads, c.head_dim, ld);
    }
    Device gx(x);
    ASSERT_EQ(gpu::rope(gx.get(), gcos.get(), gsin.get(), B, T, heads, c.head_dim, ld, transpose,
                        nullptr),
              cudaSuccess);
    expect_close(want, gx.download(), transpose ? "backward" : "forward");
  }
}

TEST_F(LlamaCudaKernels, SwigluForwardAndBackwardInDoutsBuffer) {
  const int64_t n = 5000;
  Floats g = random_floats(n, 7), u = random_floats(n, 8), d = random_floats(n, 9);
  for (float& v : g) v *= 4.0f;
  Floats out(n), dgate = d, dup(n);
  cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dgate.data(), g.data(), u.data(), n);
  Device gg(g), gu(u), gd(d), gout{Floats(n)}, gdup{Floats(n)};
  ASSERT_EQ(gpu::swiglu_forward(gout.get(), gg.get(), gu.get(), n, nullptr), cudaSuccess);
  ASSERT_EQ(gpu::swiglu_backward(gd.get(), gdup.get(), gd.get(), gg.get(), gu.get(), n, nullptr),
            cudaSuccess);
  expect_close(out, gout.download(), "out");
  expect_close(dgate, gd.download(), "dgate");
  expect_close(dup, gdup.download(), "dup");
}

}  // namespace
}  // namespace dscore::llama
