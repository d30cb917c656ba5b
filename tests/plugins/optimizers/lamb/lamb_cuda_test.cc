// The CUDA path of plugins/optimizers/lamb (lamb_cuda.cu) through the C
// ABI: a step on CUDA tensors must equal the same step on CPU tensors BIT
// FOR BIT. Both follow lamb_update.h: the same fp32 roundings with no fused
// multiply-add, and the per-tensor norms summed in the same fixed order
// (lanes, halving tree, chunks), so bitwise is what to expect, including the
// trust ratio's clamp and its zero-norm rule. Covered: every gradient and
// 16-bit-copy dtype, more tensors than one launch holds (32, and 128 trust
// ratios), a tensor of more chunks than one launch holds (320), an empty
// tensor, an all-zero parameter, and buffers too misaligned for vector
// loads. Label `gpu`: skipped (GTEST_SKIP) where no CUDA device is present.
#include <cuda_runtime.h>
#include <dscore/optimizer.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// A device copy of a host tensor; `shift` elements of padding in front
// make the buffer misaligned for 16-byte vector loads.
struct DeviceTensor {
  void* base = nullptr;
  dscore_tensor view{};
  std::vector<int64_t> shape;
  DeviceTensor(const TestTensor& host, int64_t shift) {
    const size_t elem = sdk::dtype_size(host.view()->dtype);
    const size_t bytes = static_cast<size_t>(host.numel()) * elem;
    EXPECT_EQ(cudaMalloc(&base, bytes + static_cast<size_t>(shift) * elem + 16), cudaSuccess);
    view = *host.view();
    shape = {host.numel()};
    view.shape = shape.data();
    view.data = static_cast<char*>(base) + shift * elem;
    view.device_type = DSCORE_DEVICE_CUDA;
    EXPECT_EQ(cudaMemcpy(view.data, host.view()->data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceTensor() { cudaFree(base); }
  TestTensor download(const TestTensor& like) const {
    TestTensor out(like);
    EXPECT_EQ(cudaMemcpy(out.view()->data, view.data,
                         static_cast<size_t>(like.numel()) * sdk::dtype_size(view.dtype),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }
};

class LambCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_LAMB_PLUGIN);
    vt_ = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "lamb");
  }
  std::unique_ptr<TestPluginLibrary> lib_;
  const dscore_optimizer_vtable* vt_ = nullptr;
};

TEST_F(LambCudaTest, DeclaresCudaCapability) {
  EXPECT_TRUE(lib_->find(DSCORE_KIND_OPTIMIZER, "lamb")->capabilities & DSCORE_CAP_CUDA);
}

// Host tensors of one step: p, g, m, v and the optional 16-bit copy.
struct Group {
  std::vector<TestTensor> p, g, m, v, out;
};

Group make_group(const std::vector<int64_t>& sizes, dscore_dtype grad, dscore_dtype out16,
                 uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Group grp;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t n = sizes[t];
    grp.p.emplace_back(DSCORE_DTYPE_F32, n);
    grp.g.emplace_back(grad, n);
    grp.m.emplace_back(DSCORE_DTYPE_F32, n);
    grp.v.emplace_back(DSCORE_DTYPE_F32, n);
    if (out16 != DSCORE_DTYPE_INVALID) grp.out.emplace_back(out16, n);
    const bool zero_param = t == 2;  // the trust ratio's zero-norm rule
    for (int64_t j = 0; j < n; ++j) {
      grp.p.back().set(j, zero_param ? 0.0f : 0.05f * normal(rng));
      grp.g.back().set(j, normal(rng) * (j % 3 == 0 ? 1e-4f : 3.0f));
      grp.m.back().set(j, 0.1f * normal(rng));
      grp.v.back().set(j, 0.01f * std::abs(normal(rng)));
    }
  }
  return grp;
}

dscore_status run_step(const dscore_optimizer_vtable* vt, dscore_optimizer* opt,
                       std::vector<dscore_tensor*> p, std::vector<const dscore_tensor*> g,
                       std::vector<dscore_tensor*> states, std::vector<dscore_tensor*> out,
                       void* stream) {
  dscore_optimizer_hparams h{};
  h.struct_size = sizeof h;
  h.lr = 2e-3;
  h.override_mask = DSCORE_HPARAM_BETA1;
  h.beta1 = 0.85;
  h.weight_decay_multiplier = 1;
  h.step = 3;
  h.grad_scale = 0.5;
  dscore_optimizer_step_args a{};
  a.struct_size = sizeof a;
  a.hparams = &h;
  a.tensor_count = p.size();
  a.params = p.data();
  a.grads = g.data();
  a.slot_count = 2;
  a.states = states.data();
  a.params_16bit = out.empty() ? nullptr : out.data();
  a.stream = stream;
  return vt->step(opt, &a);
}

void expect_same_bytes(const TestTensor& a, const TestTensor& b, const std::string& what) {
  const size_t bytes = static_cast<size_t>(a.numel()) * sdk::dtype_size(a.view()->dtype);
  EXPECT_EQ(std::memcmp(a.view()->data, b.view()->data, bytes), 0) << what;
}

struct LambSettings {
  double weight_decay, min_coeff, max_coeff;
  bool eps_inside_sqrt;
};

void check_cuda_equals_cpu(const dscore_optimizer_vtable* vt, TestPluginLibrary& lib,
                           const LambSettings& s, const std::vector<int64_t>& sizes,
                           dscore_dtype gd, dscore_dtype od, cudaStream_t stream) {
  CreateArgs args = CreateArgs::with_defaults(lib.find(DSCORE_KIND_OPTIMIZER, "lamb"));
  args.number("weight_decay", s.weight_decay)
      .number("min_coeff", s.min_coeff)
      .number("max_coeff", s.max_coeff)
      .boolean("eps_inside_sqrt", s.eps_inside_sqrt);
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt->create(args.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
  Group cpu = make_group(sizes, gd, od, 17);
  const size_t n = sizes.size();
  // Device copies; every 7th tensor's buffers misaligned by one element.
  std::vector<std::unique_ptr<DeviceTensor>> dp, dg, dm, dv, dout;
  std::vector<dscore_tensor*> p, states, out, hp, hstates, hout;
  std::vector<const dscore_tensor*> g, hg;
  for (size_t i = 0; i < n; ++i) {
    const int64_t shift = i % 7 == 6 ? 1 : 0;
    dp.push_back(std::make_unique<DeviceTensor>(cpu.p[i], shift));
    dg.push_back(std::make_unique<DeviceTensor>(cpu.g[i], shift));
    dm.push_back(std::make_unique<DeviceTensor>(cpu.m[i], shift));
    dv.push_back(std::make_unique<DeviceTensor>(cpu.v[i], shift));
    if (!cpu.out.empty()) dout.push_back(std::make_unique<DeviceTensor>(cpu.out[i], shift));
  }
  for (size_t i = 0; i < n; ++i) {
    p.push_back(&dp[i]->view), g.push_back(&dg[i]->view);
    hp.push_back(cpu.p[i].view()), hg.push_back(cpu.g[i].view());
    if (!cpu.out.empty()) out.push_back(&dout[i]->view), hout.push_back(cpu.out[i].view());
  }
  for (size_t i = 0; i < n; ++i) states.push_back(&dm[i]->view), hstates.push_back(cpu.m[i].view());
  for (size_t i = 0; i < n; ++i) states.push_back(&dv[i]->view), hstates.push_back(cpu.v[i].view());
  ASSERT_EQ(run_step(vt, opt, p, g, states, out, stream), DSCORE_OK)
      << FakeHost::instance().last_error();
  ASSERT_EQ(run_step(vt, opt, hp, hg, hstates, hout, nullptr), DSCORE_OK)
      << FakeHost::instance().last_error();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t i = 0; i < n; ++i) {
    const std::string at = "tensor " + std::to_string(i) + " (" + std::to_string(sizes[i]) + ")";
    expect_same_bytes(dp[i]->download(cpu.p[i]), cpu.p[i], "param of " + at);
    expect_same_bytes(dm[i]->download(cpu.m[i]), cpu.m[i], "exp_avg of " + at);
    expect_same_bytes(dv[i]->download(cpu.v[i]), cpu.v[i], "exp_avg_sq of " + at);
    if (!cpu.out.empty())
      expect_same_bytes(dout[i]->download(cpu.out[i]), cpu.out[i], "params_16bit of " + at);
  }
  vt->destroy(opt);
}

TEST_F(LambCudaTest, CudaStepEqualsCpuStepBitwiseForEveryDtype) {
  // 40 tensors (more than one launch's 32), an empty one, awkward sizes;
  // with fp32 gradients one of 21M elements (more than one launch's 320
  // chunks: the emulation takes seconds a pass over it, so the 16-bit
  // gradients, whose reads the small tensors cover, go without it).
  std::vector<int64_t> small = {1, 7, 4097, (1 << 20) + 3, 0, 1 << 16};
  for (int i = 0; i < 34; ++i) small.push_back(1 + 977 * i);
  std::vector<int64_t> large = small;
  large[5] = 21 * (1 << 20) + 5;
  const dscore_dtype grads[] = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16};
  const dscore_dtype outs[] = {DSCORE_DTYPE_INVALID, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16,
                               DSCORE_DTYPE_F32};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (dscore_dtype gd : grads)
    for (dscore_dtype od : outs) {
      SCOPED_TRACE(std::string("grad ") + sdk::dtype_name(gd) + " out16 " + sdk::dtype_name(od));
      check_cuda_equals_cpu(vt_, *lib_, {0.01, 0.01, 10.0, false},
                            gd == DSCORE_DTYPE_F32 ? large : small, gd, od, stream);
    }
  cudaStreamDestroy(stream);
}

TEST_F(LambCudaTest, CudaStepEqualsCpuStepBitwiseInEveryMode) {
  // The clamp forced to either bound, eps inside the sqrt, no decay; 140
  // small tensors: more trust ratios than one ratio launch (128) holds.
  std::vector<int64_t> sizes = {65536, 65537, 3 * 65536 - 1};
  for (int i = 0; i < 137; ++i) sizes.push_back(1 + 311 * i);
  const LambSettings modes[] = {{0.0, 0.01, 10.0, false},
                                {0.1, 0.4, 0.5, false},
                                {0.0, 3.0, 4.0, true},
                                {0.01, 0.01, 10.0, true}};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const LambSettings& s : modes) {
    SCOPED_TRACE("wd " + std::to_string(s.weight_decay) + " coeff [" + std::to_string(s.min_coeff) +
                 ", " + std::to_string(s.max_coeff) + "]" +
                 (s.eps_inside_sqrt ? " eps inside sqrt" : ""));
    check_cuda_equals_cpu(vt_, *lib_, s, sizes, DSCORE_DTYPE_BF16, DSCORE_DTYPE_BF16, stream);
  }
  cudaStreamDestroy(stream);
}

TEST_F(LambCudaTest, RejectsAGradientOnTheWrongDevice) {
  CreateArgs args = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "lamb"));
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt_->create(args.get(), &opt), DSCORE_OK);
  Group cpu = make_group({16}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 3);
  DeviceTensor p(cpu.p[0], 0), m(cpu.m[0], 0), v(cpu.v[0], 0);
  EXPECT_EQ(run_step(vt_, opt, {&p.view}, {cpu.g[0].view()}, {&m.view, &v.view}, {}, nullptr),
            DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("grad 0 is in CPU memory"), std::string::npos)
      << FakeHost::instance().last_error();
  vt_->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
