// The CUDA path of plugins/optimizers/adam (adam_cuda.cu) through the C
// ABI: a step on CUDA tensors must equal the same step on CPU tensors BIT FOR
// BIT (both perform adam_update.h's operations with the same roundings), for
// every gradient and 16-bit-copy dtype, over more tensors and chunks than
// one launch holds, and for buffers too misaligned for 16-byte loads.
// Label `gpu`: skipped (GTEST_SKIP) where no CUDA device is present.
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

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    const cudaError_t err_ = (call);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #call << ": " << cudaGetErrorString(err_); \
  } while (0)

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
  void copy_to(TestTensor& host) const {
    EXPECT_EQ(cudaMemcpy(host.view()->data, view.data,
                         static_cast<size_t>(host.numel()) * sdk::dtype_size(view.dtype),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
};

class AdamCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_ADAM_PLUGIN);
  }
  std::unique_ptr<TestPluginLibrary> lib_;
};

TEST_F(AdamCudaTest, DeclaresCudaCapability) {
  EXPECT_TRUE(lib_->find(DSCORE_KIND_OPTIMIZER, "adam")->capabilities & DSCORE_CAP_CUDA);
}

struct Group {
  std::vector<TestTensor> p, g, m, v, out;
};

Group make_group(const std::vector<int64_t>& sizes, dscore_dtype grad, dscore_dtype out16,
                 uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Group grp;
  for (int64_t n : sizes) {
    grp.p.emplace_back(DSCORE_DTYPE_F32, n);
    grp.g.emplace_back(grad, n);
    grp.m.emplace_back(DSCORE_DTYPE_F32, n);
    grp.v.emplace_back(DSCORE_DTYPE_F32, n);
    if (out16 != DSCORE_DTYPE_INVALID) grp.out.emplace_back(out16, n);
    for (int64_t j = 0; j < n; ++j) {
      grp.p.back().set(j, normal(rng));
      grp.g.back().set(j, normal(rng) * (j % 3 == 0 ? 1e-4f : 3.0f));
      grp.m.back().set(j, 0.1f * normal(rng));
      grp.v.back().set(j, 0.01f * std::abs(normal(rng)));
    }
  }
  return grp;
}

// One step of `opt` over the group's tensors (host or device views).
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

TEST_F(AdamCudaTest, CudaStepEqualsCpuStepBitwise) {
  // 40 tensors (more than one launch's 36), awkward sizes, every 7th buffer
  // misaligned; with fp32 gradients one of 21M elements (more than one
  // launch's 320 chunks: the emulation takes 4 s a pass over it, so the
  // 16-bit gradients, whose reads the small tensors cover, go without it).
  std::vector<int64_t> small = {1, 7, 4097, (1 << 20) + 3, 1 << 16};
  for (int i = 0; i < 35; ++i) small.push_back(1 + 977 * i);
  std::vector<int64_t> large = small;
  large[4] = 21 * (1 << 20) + 5;
  const dscore_dtype grads[] = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16};
  const dscore_dtype outs[] = {DSCORE_DTYPE_INVALID, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16,
                               DSCORE_DTYPE_F32};
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (const char* name : {"adam", "adamw"})
    for (dscore_dtype gd : grads)
      for (dscore_dtype od : outs) {
        SCOPED_TRACE(std::string(name) + " grad " + sdk::dtype_name(gd) + " out16 " +
                     sdk::dtype_name(od));
        auto* vt = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, name);
        CreateArgs args = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, name));
        args.number("weight_decay", 0.05).boolean("adam_w_mode", false);
        dscore_optimizer* opt = nullptr;
        ASSERT_EQ(vt->create(args.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
        const std::vector<int64_t>& sizes = gd == DSCORE_DTYPE_F32 ? large : small;
        Group cpu = make_group(sizes, gd, od, 7);
        std::vector<std::unique_ptr<DeviceTensor>> dev;
        std::vector<dscore_tensor*> dp, ds, dout, hp, hs, hout;
        std::vector<const dscore_tensor*> dg, hg;
        auto upload = [&](TestTensor& t, size_t i) {
          dev.push_back(std::make_unique<DeviceTensor>(t, i % 7 == 6 ? 1 : 0));
          return &dev.back()->view;
        };
        const size_t n = sizes.size();
        for (size_t i = 0; i < n; ++i) {
          dp.push_back(upload(cpu.p[i], i));
          dg.push_back(upload(cpu.g[i], i));
          if (!cpu.out.empty()) dout.push_back(upload(cpu.out[i], i));
          hp.push_back(cpu.p[i].view());
          hg.push_back(cpu.g[i].view());
          if (!cpu.out.empty()) hout.push_back(cpu.out[i].view());
        }
        for (size_t i = 0; i < n; ++i)
          ds.push_back(upload(cpu.m[i], i)), hs.push_back(cpu.m[i].view());
        for (size_t i = 0; i < n; ++i)
          ds.push_back(upload(cpu.v[i], i)), hs.push_back(cpu.v[i].view());
        ASSERT_EQ(run_step(vt, opt, dp, dg, ds, dout, stream), DSCORE_OK)
            << FakeHost::instance().last_error();
        ASSERT_EQ(run_step(vt, opt, hp, hg, hs, hout, nullptr), DSCORE_OK)
            << FakeHost::instance().last_error();
        CUDA_OK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < n; ++i) {
          TestTensor p(cpu.p[i]), m(cpu.m[i]), v(cpu.v[i]);
          // Device tensors were uploaded in the order p, g, [out] per i, then m, v.
          const size_t per = cpu.out.empty() ? 2 : 3;
          dev[i * per]->copy_to(p);
          dev[n * per + i]->copy_to(m);
          dev[n * per + n + i]->copy_to(v);
          const std::string at =
              "tensor " + std::to_string(i) + " (" + std::to_string(sizes[i]) + ")";
          expect_same_bytes(p, cpu.p[i], "param of " + at);
          expect_same_bytes(m, cpu.m[i], "exp_avg of " + at);
          expect_same_bytes(v, cpu.v[i], "exp_avg_sq of " + at);
          if (!cpu.out.empty()) {
            TestTensor o(cpu.out[i]);
            dev[i * per + 2]->copy_to(o);
            expect_same_bytes(o, cpu.out[i], "params_16bit of " + at);
          }
        }
        vt->destroy(opt);
      }
  cudaStreamDestroy(stream);
}

TEST_F(AdamCudaTest, RejectsAGradientOnTheWrongDevice) {
  auto* vt = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "adam");
  CreateArgs args = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "adam"));
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt->create(args.get(), &opt), DSCORE_OK);
  Group cpu = make_group({16}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 3);
  DeviceTensor p(cpu.p[0], 0), m(cpu.m[0], 0), v(cpu.v[0], 0);
  EXPECT_EQ(run_step(vt, opt, {&p.view}, {cpu.g[0].view()}, {&m.view, &v.view}, {}, nullptr),
            DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("grad 0 is in CPU memory"), std::string::npos)
      << FakeHost::instance().last_error();
  vt->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
