// The fused CUDA attention (plugins/models/transformer_common/cuda/flash_attention.h)
// against the CPU's tiled fp32 attention (cpu/attention.h) on the same
// inputs, each a bf16 value. Built twice from this file:
// - flash_attention_emulated_test runs the kernels' source on the CPU
//   emulation of CUDA (tests/cuda_emulation), in both thread orders, on
//   every machine;
// - flash_attention_cuda_test (label gpu) runs the nvcc build on a GPU and
//   skips where there is none.
// Tolerance: every output within 1e-2 of its largest reference element
// (P, dS and every output are rounded to bf16; the CPU bf16 attention
// reaches 3.3e-3 with P and dS rounded alone), the logsumexp within 1e-2
// absolute. Shapes: GPT's packed q|k|v (head size 12, padded to 16 with
// element loads), grouped-query heads with T across the 64-row tiles
// (head sizes 64 and 128, 16-byte loads), head size 48 (padded to 64).
// Backward twice gives the same bits, and shapes the kernels do not take
// are refused.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "transformer_common/cpu/attention.h"
#include "transformer_common/cuda/flash_attention.h"
#ifdef DSCORE_CUDA_EMULATION
#include "cuda_emulation.h"
#endif

namespace dscore::transformer {
namespace {

using gpu::FlashShape;
using bf16 = __nv_bfloat16;

// Runs `body` once, or under the emulation once per thread order.
void for_each_schedule(const std::function<void()>& body) {
#ifdef DSCORE_CUDA_EMULATION
  for (auto order : {cuda_emulation::Schedule::kAscending, cuda_emulation::Schedule::kDescending}) {
    SCOPED_TRACE(order == cuda_emulation::Schedule::kAscending ? "ascending thread order"
                                                               : "descending thread order");
    cuda_emulation::set_schedule(order);
    body();
  }
  cuda_emulation::set_schedule(cuda_emulation::Schedule::kAscending);
#else
  body();
#endif
}

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Device memory of n elements of T, freed at scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    data_ = static_cast<T*>(p);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }
  size_t size() const { return n_; }

 private:
  T* data_ = nullptr;
  size_t n_;
};

DeviceArray<bf16>* upload(DeviceArray<bf16>& d, const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = sdk::float_to_bf16(v[i]);
  EXPECT_EQ(cudaMemcpy(d.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  return &d;
}

std::vector<float> download(const DeviceArray<bf16>& d) {
  std::vector<uint16_t> bits(d.size());
  EXPECT_EQ(cudaMemcpy(bits.data(), d.get(), bits.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = sdk::bf16_to_float(bits[i]);
  return v;
}

std::vector<float> download(const DeviceArray<float>& d) {
  std::vector<float> v(d.size());
  EXPECT_EQ(cudaMemcpy(v.data(), d.get(), v.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// n normal values, each a bf16 value.
std::vector<float> bf16_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = sdk::bf16_to_float(sdk::float_to_bf16(normal(rng)));
  return v;
}

// max |got - ref| <= tol * max |ref| over the channels `used` marks.
void expect_close(const std::vector<float>& ref, const std::vector<float>& got,
                  const std::vector<bool>& used, double tol, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double scale = 0, worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!used[i]) continue;
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
    const double d = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(d <= worst)) worst = d, at = i;  // NaN counts as worst
  }
  EXPECT_GT(scale, 0.0) << what << ": the reference is all zero";
  EXPECT_LE(worst, tol * scale) << what << ": element " << at << " is " << got[at] << ", expected "
                                << ref[at] << " (largest |expected| " << scale << ")";
}

struct Case {
  const char* name;
  int64_t B, Tn, NH, NKV, hd;
  bool packed;  // GPT's rows of [q | k | v]
};

// The layout of q, k, v (one buffer when packed) and out, and which
// elements of each row are head channels.
struct Layout {
  explicit Layout(const Case& c) {
    const int64_t qc = c.NH * c.hd, kvc = c.NKV * c.hd;
    shape = {c.B, c.Tn, c.NH, c.NKV, c.hd, 0, 0, qc};
    if (c.packed) {
      shape.q_ld = shape.kv_ld = qc + 2 * kvc;
      k_offset = qc;
      v_offset = qc + kvc;
      inputs = static_cast<size_t>(c.B * c.Tn * shape.q_ld);
    } else {
      shape.q_ld = qc;
      shape.kv_ld = kvc;
      k_offset = c.B * c.Tn * qc;
      v_offset = k_offset + c.B * c.Tn * kvc;
      inputs = static_cast<size_t>(v_offset + c.B * c.Tn * kvc);
    }
  }
  FlashShape shape;
  int64_t k_offset = 0, v_offset = 0;
  size_t inputs = 0;
  cpu::AttentionShape cpu() const {
    return {shape.B,        shape.Tn,   shape.NH,    shape.NKV,
            shape.head_dim, shape.q_ld, shape.kv_ld, shape.out_ld};
  }
};

void check_case(const Case& c) {
  SCOPED_TRACE(c.name);
  const Layout l(c);
  const FlashShape& s = l.shape;
  const size_t outs = static_cast<size_t>(s.B * s.Tn * s.out_ld);
  const size_t rows = static_cast<size_t>(s.B * s.NH * s.Tn);
  const auto inputs = bf16_values(l.inputs, 1), dout = bf16_values(outs, 2);

  // The CPU reference, fp32 on the same values.
  std::vector<float> out(outs), lse(rows), grads(l.inputs, 0.0f);
  const float* q = inputs.data();
  cpu::attention_forward(out.data(), lse.data(), q, q + l.k_offset, q + l.v_offset, l.cpu());
  cpu::attention_backward(grads.data(), grads.data() + l.k_offset, grads.data() + l.v_offset,
                          dout.data(), q, q + l.k_offset, q + l.v_offset, out.data(), lse.data(),
                          l.cpu());

  DeviceArray<bf16> d_in(l.inputs), d_dout(outs), d_out(outs), d_grads(l.inputs);
  DeviceArray<float> d_lse(rows), d_row_dots(rows);
  upload(d_in, inputs);
  upload(d_dout, dout);
  upload(d_grads, bf16_values(l.inputs, 3));  // overwritten: garbage in every channel first
  bf16* dq = d_grads.get();
  const bf16* dq_in = d_in.get();
  ASSERT_EQ(gpu::flash_attention_forward(d_out.get(), d_lse.get(), dq_in, dq_in + l.k_offset,
                                         dq_in + l.v_offset, s, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::flash_attention_backward(dq, dq + l.k_offset, dq + l.v_offset, d_dout.get(), dq_in,
                                          dq_in + l.k_offset, dq_in + l.v_offset, d_out.get(),
                                          d_lse.get(), d_row_dots.get(), s, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<bool> every_out(outs, true), every_row(rows, true);
  expect_close(out, download(d_out), every_out, 1e-2, "out");
  const auto got_lse = download(d_lse);
  for (size_t r = 0; r < rows; ++r) ASSERT_NEAR(got_lse[r], lse[r], 1e-2) << "lse of row " << r;
  // Each part of the gradient buffer on its own (q, k, v differ in scale).
  const auto got = download(d_grads);
  const int64_t parts[3][2] = {
      {0, c.NH * c.hd}, {l.k_offset, c.NKV * c.hd}, {l.v_offset, c.NKV * c.hd}};
  const char* names[3] = {"dq", "dk", "dv"};
  for (int p = 0; p < 3; ++p) {
    std::vector<bool> used(l.inputs, false);
    const int64_t ld = p == 0 ? s.q_ld : s.kv_ld;
    for (int64_t row = 0; row < s.B * s.Tn; ++row)
      for (int64_t ch = 0; ch < parts[p][1]; ++ch) used[parts[p][0] + row * ld + ch] = true;
    expect_close(grads, got, used, 1e-2, names[p]);
  }

  // Backward again: the same bits.
  ASSERT_EQ(gpu::flash_attention_backward(dq, dq + l.k_offset, dq + l.v_offset, d_dout.get(), dq_in,
                                          dq_in + l.k_offset, dq_in + l.v_offset, d_out.get(),
                                          d_lse.get(), d_row_dots.get(), s, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto again = download(d_grads);
  EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0)
      << "a second backward gave other bits";
}

class FlashAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
  }
};

TEST_F(FlashAttention, GptPackedRowsWithASmallHead) {
  for_each_schedule([] { check_case({"packed, head 12", 2, 37, 4, 4, 12, true}); });
}

TEST_F(FlashAttention, GroupedQueryHeadsAcrossTiles) {
  for_each_schedule([] { check_case({"grouped, head 64", 2, 130, 4, 2, 64, false}); });
}

TEST_F(FlashAttention, HeadSize128AndOneKeyValueHead) {
  for_each_schedule([] { check_case({"one kv head, head 128", 1, 96, 2, 1, 128, false}); });
}

TEST_F(FlashAttention, HeadSize48PaddedTo64) {
  for_each_schedule([] { check_case({"head 48", 1, 70, 2, 2, 48, true}); });
}

TEST_F(FlashAttention, ShapesTheKernelsDoNotTakeAreRefused) {
  FlashShape s{1, 8, 4, 4, 160, 640, 640, 640};
  EXPECT_EQ(gpu::flash_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, s, nullptr),
            cudaErrorInvalidValue)
      << "head size 160";
  s = {1, 8, 4, 3, 16, 64, 48, 64};
  EXPECT_EQ(gpu::flash_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, s, nullptr),
            cudaErrorInvalidValue)
      << "4 query heads over 3 key/value heads";
}

}  // namespace
}  // namespace dscore::transformer
