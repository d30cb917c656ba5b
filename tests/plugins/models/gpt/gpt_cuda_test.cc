// The gpt model on "device": "cuda" against "device": "cpu", through the C
// ABI (fake host, FakeLayers hooks over host parameters and gradients): the
// same parameters and token batch give the same loss, forward() logits and
// gradients, within the tolerances below; the CUDA path repeats bit for bit
// and accumulates into the gradient views, whether they are in host or in
// device memory (the same bits). Label `gpu`: each test skips
// (GTEST_SKIP) where no CUDA device is visible.
//
// Tolerances (the CPU fp32 result is the reference):
//   cuda_dtype fp32: loss |rel| <= 1e-4; logits max|diff| <= 1e-4 max|logit|;
//     each gradient max|diff| <= 1e-3 max|grad| (fp32 GEMMs, no TF32: the
//     differences are summation order only).
//   cuda_dtype bf16: loss |rel| <= 2e-2; logits max|diff| <= 5e-2 max|logit|;
//     each gradient ||diff|| <= 0.1 ||grad|| and max|diff| <= 0.2 max|grad|
//     (activations, parameters and per-layer gradients rounded to bf16's 8
//     mantissa bits; sums like LayerNorm's bias gradient cancel, which
//     magnifies the relative error of small tensors). A wrong kernel gives
//     errors of order 1.
#include <cuda_runtime_api.h>
#include <dscore/model.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"
#include "tests/fakes/scoped_env.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"

namespace {

namespace fakes = dscore::testing;
using dscore::transformer::testing::FakeLayers;

// The model and batch: the tests' own, and the one engine_cuda_engine_test
// trains (tests/core/engine/cuda_engine_test.cc), so a kernel that is off
// only at that test's shapes shows here.
struct Shape {
  int64_t batch, block, vocab, n_head, n_embd;
};
constexpr Shape kSmall{3, 32, 203, 4, 64};
constexpr Shape kEngineTests{4, 16, 256, 2, 32};

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

struct Options {
  std::string device = "cpu";
  std::string cuda_dtype = "fp32";
  bool checkpoint = false;
  Shape shape = kSmall;
};

// One gpt model instance created through the vtable.
class Model {
 public:
  Model(const fakes::TestPluginLibrary& lib, const Options& o)
      : vt_(lib.vtable<dscore_model_vtable>(DSCORE_KIND_MODEL, "gpt")) {
    fakes::CreateArgs args = fakes::CreateArgs::with_defaults(lib.find(DSCORE_KIND_MODEL, "gpt"));
    args.integer("n_layer", 2)
        .integer("n_head", o.shape.n_head)
        .integer("n_embd", o.shape.n_embd)
        .integer("block_size", o.shape.block);
    args.integer("vocab_size", o.shape.vocab)
        .string("device", o.device)
        .string("cuda_dtype", o.cuda_dtype)
        .seed(7);
    if (o.checkpoint) args.boolean("checkpoint_activations", true).integer("number_checkpoints", 1);
    status_ = vt_->create(args.get(), &self_);
  }
  ~Model() {
    if (self_ != nullptr) vt_->destroy(self_);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  dscore_status status() const { return status_; }
  const dscore_model_vtable* vt() const { return vt_; }
  dscore_model* self() const { return self_; }
  const dscore_model_description& description() const {
    const dscore_model_description* d = nullptr;
    EXPECT_EQ(vt_->describe(self_, &d), DSCORE_OK);
    return *d;
  }

 private:
  const dscore_model_vtable* vt_;
  dscore_model* self_ = nullptr;
  dscore_status status_ = DSCORE_UNKNOWN;
};

float get(FakeLayers& layers, dscore_dtype dtype, bool grad, size_t l, size_t i, int64_t k) {
  if (dtype == DSCORE_DTYPE_F32)
    return grad ? layers.grad<float>(l, i)[k] : layers.param<float>(l, i)[k];
  const uint16_t bits = grad ? layers.grad<uint16_t>(l, i)[k] : layers.param<uint16_t>(l, i)[k];
  return dscore::sdk::bf16_to_float(bits);
}

// The model's initial parameters, perturbed (biases start at 0 and LayerNorm
// weights at 1; the perturbation exercises their paths), into `layers`.
void init_layers(const Model& m, FakeLayers& layers, dscore_dtype dtype) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
  size_t index = 0;
  for (size_t l = 0; l < layers.layer_count(); ++l) {
    for (size_t i = 0; i < layers.param_count(l); ++i, ++index) {
      const int64_t n = layers.numel(l, i);
      std::vector<float> v(static_cast<size_t>(n));
      dscore_tensor t{};
      t.struct_size = sizeof t;
      t.data = v.data();
      t.dtype = DSCORE_DTYPE_F32;
      t.device_type = DSCORE_DEVICE_CPU;
      t.ndim = 1;
      t.numel = n;
      ASSERT_EQ(m.vt()->init_param(m.self(), index, 0, n, &t), DSCORE_OK);
      for (int64_t k = 0; k < n; ++k) {
        const float x = v[static_cast<size_t>(k)] + noise(rng);
        if (dtype == DSCORE_DTYPE_F32)
          layers.param<float>(l, i)[k] = x;
        else
          layers.param<uint16_t>(l, i)[k] = dscore::sdk::float_to_bf16(x);
      }
    }
  }
}

// (B, T + 1) tokens; sample 2 ends in 6 padding tokens (-1).
class Tokens {
 public:
  explicit Tokens(const Shape& s = kSmall) : ids_(static_cast<size_t>(s.batch * (s.block + 1))) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(s.vocab) - 1);
    for (int32_t& id : ids_) id = token(rng);
    for (int64_t i = s.block + 1 - 6; i < s.block + 1; ++i)
      ids_[static_cast<size_t>(2 * (s.block + 1) + i)] = -1;
    shape_[0] = s.batch;
    shape_[1] = s.block + 1;
    tensor_.struct_size = sizeof tensor_;
    tensor_.data = ids_.data();
    tensor_.dtype = DSCORE_DTYPE_I32;
    tensor_.device_type = DSCORE_DEVICE_CPU;
    tensor_.ndim = 2;
    tensor_.shape = shape_;
    tensor_.numel = s.batch * (s.block + 1);
    tensor_.name = "tokens";
    batch_.struct_size = sizeof batch_;
    batch_.batch_size = s.batch;
    batch_.count = 1;
    batch_.tensors = &pointer_;
  }
  const dscore_batch* batch() const { return &batch_; }

 private:
  std::vector<int32_t> ids_;
  int64_t shape_[2] = {0, 0};
  dscore_tensor tensor_{};
  const dscore_tensor* pointer_ = &tensor_;
  dscore_batch batch_{};
};

double train_step(const Model& m, FakeLayers& layers, const Tokens& tokens, double loss_scale) {
  double loss = 0;
  EXPECT_EQ(m.vt()->forward_backward(m.self(), tokens.batch(), &layers.hooks(), loss_scale, &loss),
            DSCORE_OK)
      << fakes::FakeHost::instance().last_error();
  EXPECT_EQ(layers.outstanding(), 0);
  return loss;
}

struct GradTolerance {
  double max_rel;   // max|diff| <= max_rel * max|ref|
  double norm_rel;  // ||diff|| <= norm_rel * ||ref|| (0: not checked)
};

std::string short_number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

// Also prints each tensor's largest difference against its largest
// element, with where it is: a GPU run's record of how close it came.
void expect_grads_near(FakeLayers& ref, FakeLayers& got, dscore_dtype dtype, GradTolerance tol) {
  for (size_t l = 0; l < ref.layer_count(); ++l) {
    for (size_t i = 0; i < ref.param_count(l); ++i) {
      double max_ref = 0, max_diff = 0, norm_ref = 0, norm_diff = 0, at_ref = 0, at_got = 0;
      int64_t at = -1;
      for (int64_t k = 0; k < ref.numel(l, i); ++k) {
        const double r = get(ref, dtype, true, l, i, k), g = get(got, dtype, true, l, i, k);
        max_ref = std::max(max_ref, std::abs(r));
        if (!(std::abs(g - r) <= max_diff)) {
          max_diff = std::abs(g - r);
          at = k;
          at_ref = r;
          at_got = g;
        }
        norm_ref += r * r;
        norm_diff += (g - r) * (g - r);
      }
      std::printf("  layer %zu param %zu: max|diff| / max|ref| %.3g (element %lld: %.6g vs %.6g)\n",
                  l, i, max_diff / std::max(max_ref, 1e-30), static_cast<long long>(at), at_got,
                  at_ref);
      EXPECT_GT(max_ref, 0.0) << "layer " << l << " param " << i
                              << ": the reference gradient is all zero";
      EXPECT_LE(max_diff, tol.max_rel * max_ref)
          << "layer " << l << " param " << i << " max|grad| " << max_ref;
      if (tol.norm_rel > 0) {
        EXPECT_LE(std::sqrt(norm_diff), tol.norm_rel * std::sqrt(norm_ref))
            << "layer " << l << " param " << i << " ||grad|| " << std::sqrt(norm_ref);
      }
    }
  }
}

// The parameters and gradients of `host` copied into device memory
// (cudaMalloc) and lent to the model as CUDA views, as the engine lends them
// when ZeRO's buffers live on the GPU: the model reads the parameters in
// place and adds its gradients there.
class DeviceLayers {
 public:
  DeviceLayers(FakeLayers& host, dscore_dtype dtype) : host_(&host) {
    const size_t es = dtype == DSCORE_DTYPE_F32 ? 4 : 2;
    layers_.resize(host.layer_count());
    for (size_t l = 0; l < host.layer_count(); ++l) {
      Layer& layer = layers_[l];
      for (size_t i = 0; i < host.param_count(l); ++i) {
        const int64_t n = host.numel(l, i);
        const size_t bytes = static_cast<size_t>(n) * es;
        void* param = nullptr;
        void* grad = nullptr;
        EXPECT_EQ(cudaMalloc(&param, bytes), cudaSuccess);
        EXPECT_EQ(cudaMalloc(&grad, bytes), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(param, host.param<unsigned char>(l, i), bytes, cudaMemcpyHostToDevice),
                  cudaSuccess);
        EXPECT_EQ(cudaMemcpy(grad, host.grad<unsigned char>(l, i), bytes, cudaMemcpyHostToDevice),
                  cudaSuccess);
        memory_.push_back(param);
        memory_.push_back(grad);
        layer.bytes.push_back(bytes);
        layer.params.push_back(device_tensor(param, dtype, n));
        layer.grads.push_back(device_tensor(grad, dtype, n));
      }
      for (size_t i = 0; i < layer.params.size(); ++i) {
        layer.param_ptrs.push_back(&layer.params[i]);
        layer.grad_ptrs.push_back(&layer.grads[i]);
      }
    }
    hooks_.struct_size = sizeof hooks_;
    hooks_.ctx = this;
    hooks_.acquire = &acquire;
    hooks_.release = &release;
    hooks_.grads_ready = &grads_ready;
  }
  ~DeviceLayers() {
    for (void* p : memory_) cudaFree(p);
  }
  DeviceLayers(const DeviceLayers&) = delete;
  DeviceLayers& operator=(const DeviceLayers&) = delete;

  const dscore_model_hooks& hooks() const { return hooks_; }
  int outstanding() const { return outstanding_; }
  // The device gradients into the host layers' gradient memory.
  void download_grads() {
    for (size_t l = 0; l < layers_.size(); ++l)
      for (size_t i = 0; i < layers_[l].grads.size(); ++i)
        ASSERT_EQ(cudaMemcpy(host_->grad<unsigned char>(l, i), layers_[l].grads[i].data,
                             layers_[l].bytes[i], cudaMemcpyDeviceToHost),
                  cudaSuccess);
  }

 private:
  struct Layer {
    std::vector<size_t> bytes;
    std::vector<dscore_tensor> params, grads;
    std::vector<const dscore_tensor*> param_ptrs;
    std::vector<dscore_tensor*> grad_ptrs;
  };
  static dscore_tensor device_tensor(void* data, dscore_dtype dtype, int64_t numel) {
    dscore_tensor t{};
    t.struct_size = sizeof t;
    t.data = data;
    t.dtype = dtype;
    t.device_type = DSCORE_DEVICE_CUDA;
    t.device_id = 0;
    t.ndim = 1;
    t.numel = numel;
    return t;
  }
  static dscore_status acquire(void* ctx, size_t l, dscore_acquire_mode mode,
                               dscore_layer_views* out) {
    auto* self = static_cast<DeviceLayers*>(ctx);
    if (l >= self->layers_.size()) return DSCORE_OUT_OF_RANGE;
    Layer& layer = self->layers_[l];
    self->outstanding_ += 1;
    out->count = layer.param_ptrs.size();
    out->params = layer.param_ptrs.data();
    out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? layer.grad_ptrs.data() : nullptr;
    return DSCORE_OK;
  }
  static dscore_status release(void* ctx, size_t) {
    static_cast<DeviceLayers*>(ctx)->outstanding_ -= 1;
    return DSCORE_OK;
  }
  static dscore_status grads_ready(void*, size_t) { return DSCORE_OK; }

  FakeLayers* host_;
  std::vector<Layer> layers_;
  std::vector<void*> memory_;
  int outstanding_ = 0;
  dscore_model_hooks hooks_{};
};

class GptCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    lib_ = std::make_unique<fakes::TestPluginLibrary>(DSCORE_GPT_PLUGIN);
  }

  // CPU vs CUDA for one configuration: loss, gradients, then forward().
  void compare(const Options& cuda, dscore_dtype views, double loss_rel, double logits_rel,
               GradTolerance grads) {
    Options reference;
    reference.shape = cuda.shape;
    Model cpu_model(*lib_, reference);
    Model cuda_model(*lib_, cuda);
    ASSERT_EQ(cpu_model.status(), DSCORE_OK) << fakes::FakeHost::instance().last_error();
    ASSERT_EQ(cuda_model.status(), DSCORE_OK) << fakes::FakeHost::instance().last_error();
    FakeLayers cpu_layers(cpu_model.description(), views),
        cuda_layers(cuda_model.description(), views);
    init_layers(cpu_model, cpu_layers, views);
    init_layers(cuda_model, cuda_layers, views);
    Tokens tokens(cuda.shape);
    const double cpu_loss = train_step(cpu_model, cpu_layers, tokens, 2.0);
    const double cuda_loss = train_step(cuda_model, cuda_layers, tokens, 2.0);
    EXPECT_GT(cpu_loss, 1.0);  // about ln(203) = 5.3 at initialisation
    EXPECT_NEAR(cuda_loss, cpu_loss, loss_rel * cpu_loss);
    for (size_t l = 0; l < cuda_layers.layer_count(); ++l)
      EXPECT_EQ(cuda_layers.grads_ready_calls(l), 1);
    expect_grads_near(cpu_layers, cuda_layers, views, grads);

    const int64_t B = cuda.shape.batch, V = cuda.shape.vocab;
    fakes::TestTensor cpu_out(DSCORE_DTYPE_F32, {B, V}), cuda_out(DSCORE_DTYPE_F32, {B, V});
    double cpu_fwd = 0, cuda_fwd = 0;
    ASSERT_EQ(cpu_model.vt()->forward(cpu_model.self(), tokens.batch(), &cpu_layers.hooks(),
                                      &cpu_fwd, cpu_out.view()),
              DSCORE_OK);
    ASSERT_EQ(cuda_model.vt()->forward(cuda_model.self(), tokens.batch(), &cuda_layers.hooks(),
                                       &cuda_fwd, cuda_out.view()),
              DSCORE_OK)
        << fakes::FakeHost::instance().last_error();
    EXPECT_NEAR(cuda_fwd, cpu_fwd, loss_rel * cpu_fwd);
    double max_logit = 0, max_diff = 0;
    for (int64_t k = 0; k < B * V; ++k) {
      max_logit = std::max(max_logit, std::abs(static_cast<double>(cpu_out.get(k))));
      max_diff =
          std::max(max_diff, std::abs(static_cast<double>(cuda_out.get(k)) - cpu_out.get(k)));
    }
    EXPECT_GT(max_logit, 0.0);
    EXPECT_LE(max_diff, logits_rel * max_logit);
  }

  std::unique_ptr<fakes::TestPluginLibrary> lib_;
};

TEST_F(GptCuda, Fp32MatchesCpu) {
  compare(Options{"cuda", "fp32", false}, DSCORE_DTYPE_F32, 1e-4, 1e-4, {1e-3, 0});
}

// At the engine test's shapes (C 32, 2 heads of 16, T 16, V 256, 4 samples).
TEST_F(GptCuda, Fp32MatchesCpuAtTheEngineTestsShapes) {
  Options cuda{"cuda", "fp32", false};
  cuda.shape = kEngineTests;
  compare(cuda, DSCORE_DTYPE_F32, 1e-4, 1e-4, {1e-3, 0});
}

TEST_F(GptCuda, Fp32WithActivationCheckpointingMatchesCpu) {
  compare(Options{"cuda", "fp32", true}, DSCORE_DTYPE_F32, 1e-4, 1e-4, {1e-3, 0});
}

// With the fused attention (the default) and the unfused one.
TEST_F(GptCuda, Bf16MatchesCpuWithinBf16Error) {
  for (const char* attention : {"fused", "unfused"}) {
    SCOPED_TRACE(attention);
    dscore::ScopedEnv kernels("DSCORE_CUDA_ATTENTION", std::string(attention));
    compare(Options{"cuda", "bf16", false}, DSCORE_DTYPE_F32, 2e-2, 5e-2, {0.2, 0.1});
  }
}

// bf16 host views: the upload converts bf16 -> fp32 on the device, commit()
// adds into bf16 gradients; the CPU backend reads the same bf16 views.
TEST_F(GptCuda, Fp32ComputeOnBf16ViewsMatchesCpu) {
  compare(Options{"cuda", "fp32", false}, DSCORE_DTYPE_BF16, 1e-4, 1e-4, {2e-2, 1e-2});
}

// Same inputs, same bits; a second call without zeroing doubles the views.
// Except the tied embedding's: it receives two adds per call (the LM head's
// gradient, then the embedding's), so the second call gives
// (g + head) + embedding rather than 2 g, within a few ulps of the
// tensor's largest element (seen on an H100: 824 of 12992 elements off 2 g,
// exactly the rows of the tokens in the batch, where both adds are nonzero).
TEST_F(GptCuda, RepeatsBitForBitAndAccumulates) {
  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    Model model(*lib_, Options{"cuda", dtype, false});
    ASSERT_EQ(model.status(), DSCORE_OK) << fakes::FakeHost::instance().last_error();
    FakeLayers first(model.description(), DSCORE_DTYPE_F32),
        again(model.description(), DSCORE_DTYPE_F32);
    init_layers(model, first, DSCORE_DTYPE_F32);
    init_layers(model, again, DSCORE_DTYPE_F32);
    Tokens tokens;
    const double loss1 = train_step(model, first, tokens, 1.0);
    const double loss2 = train_step(model, again, tokens, 1.0);
    EXPECT_EQ(loss1, loss2);
    const double loss3 = train_step(model, again, tokens, 1.0);
    EXPECT_EQ(loss1, loss3);
    // Every tensor that differs: how many elements, the first, the largest gap.
    std::string differing;
    for (size_t l = 0; l < first.layer_count(); ++l)
      for (size_t i = 0; i < first.param_count(l); ++i) {
        const bool tied_embedding = l == 0 && i == 0;
        double largest = 0;
        for (int64_t k = 0; k < first.numel(l, i); ++k)
          largest = std::max(largest, std::fabs(static_cast<double>(first.grad<float>(l, i)[k])));
        const double allowed = tied_embedding ? 1e-6 * largest : 0.0;
        int64_t count = 0, at = -1;
        double gap = 0;
        for (int64_t k = 0; k < first.numel(l, i); ++k) {
          const float want = 2.0f * first.grad<float>(l, i)[k], got = again.grad<float>(l, i)[k];
          if (std::fabs(static_cast<double>(want) - got) <= allowed) continue;
          if (count++ == 0) at = k;
          gap = std::max(gap, std::fabs(static_cast<double>(want) - got));
        }
        if (count > 0)
          differing += " layer " + std::to_string(l) + " param " + std::to_string(i) + ": " +
                       std::to_string(count) + " of " + std::to_string(first.numel(l, i)) +
                       " (first " + std::to_string(at) + ", largest gap " + short_number(gap) +
                       ");";
      }
    EXPECT_EQ(differing, "") << "gradients of the second call are not the first's bits";
  }
}

// Views in device memory (what the engine lends when ZeRO's buffers are on
// the GPU) give the bits of host views: parameters read in place or
// converted on the device, gradients added there with the host's
// arithmetic; a second call accumulates.
TEST_F(GptCuda, DeviceViewsGiveTheBitsOfHostViews) {
  for (const char* compute : {"fp32", "bf16"}) {
    for (dscore_dtype views : {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16}) {
      SCOPED_TRACE(std::string(compute) + " compute, " + dscore::sdk::dtype_name(views) + " views");
      Model model(*lib_, Options{"cuda", compute, false});
      ASSERT_EQ(model.status(), DSCORE_OK) << fakes::FakeHost::instance().last_error();
      FakeLayers on_host(model.description(), views), on_device(model.description(), views);
      init_layers(model, on_host, views);
      init_layers(model, on_device, views);
      Tokens tokens;
      const double host_loss = train_step(model, on_host, tokens, 2.0);
      const double host_loss2 = train_step(model, on_host, tokens, 2.0);
      DeviceLayers device(on_device, views);
      double device_loss = 0, device_loss2 = 0;
      ASSERT_EQ(model.vt()->forward_backward(model.self(), tokens.batch(), &device.hooks(), 2.0,
                                             &device_loss),
                DSCORE_OK)
          << fakes::FakeHost::instance().last_error();
      ASSERT_EQ(model.vt()->forward_backward(model.self(), tokens.batch(), &device.hooks(), 2.0,
                                             &device_loss2),
                DSCORE_OK)
          << fakes::FakeHost::instance().last_error();
      EXPECT_EQ(device.outstanding(), 0);
      EXPECT_EQ(device_loss, host_loss);
      EXPECT_EQ(device_loss2, host_loss2);
      device.download_grads();
      const size_t es = views == DSCORE_DTYPE_F32 ? 4 : 2;
      for (size_t l = 0; l < on_host.layer_count(); ++l)
        for (size_t i = 0; i < on_host.param_count(l); ++i)
          ASSERT_EQ(
              std::memcmp(on_host.grad<unsigned char>(l, i), on_device.grad<unsigned char>(l, i),
                          static_cast<size_t>(on_host.numel(l, i)) * es),
              0)
              << "layer " << l << " param " << i;
    }
  }
}

}  // namespace
