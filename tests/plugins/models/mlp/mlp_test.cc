// Tests of plugins/models/mlp through the C ABI with a recording hook host:
// description, gradients against central differences, the hook call order
// model.h prescribes, loss-scale linearity, 16-bit views, deterministic and
// sliceable init_param / synthetic_batch, and that the synthetic task is
// learnable with the adam plugin.
#include <dscore/model.h>
#include <dscore/optimizer.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {
namespace {

// The host side of forward_backward: owns every layer's parameters and
// gradients (in the dtypes a test picks), lends them through the hooks and
// records the call sequence. Can fail a chosen hook call.
class HookHost {
 public:
  HookHost(const dscore_model_vtable* vt, const dscore_model* model,
           dscore_dtype param_dtype = DSCORE_DTYPE_F32,
           dscore_dtype grad_dtype = DSCORE_DTYPE_F32) {
    const dscore_model_description* d = nullptr;
    EXPECT_EQ(vt->describe(model, &d), DSCORE_OK);
    size_t index = 0;
    layers_.resize(d->layer_count);
    for (size_t l = 0; l < d->layer_count; ++l) {
      for (size_t k = 0; k < d->layers[l]->param_count; ++k, ++index) {
        const dscore_model_param* p = d->layers[l]->params[k];
        TestTensor init(DSCORE_DTYPE_F32, p->numel);
        EXPECT_EQ(vt->init_param(model, index, 0, p->numel, init.view()), DSCORE_OK);
        layers_[l].params.emplace_back(param_dtype,
                                       std::vector<int64_t>(p->shape, p->shape + p->ndim));
        layers_[l].grads.emplace_back(grad_dtype,
                                      std::vector<int64_t>(p->shape, p->shape + p->ndim));
        for (int64_t e = 0; e < p->numel; ++e) layers_[l].params.back().set(e, init.get(e));
      }
    }
    for (Layer& layer : layers_) {
      for (TestTensor& t : layer.params) layer.param_ptrs.push_back(t.view());
      for (TestTensor& t : layer.grads) layer.grad_ptrs.push_back(t.view());
    }
    hooks_ = {sizeof(dscore_model_hooks), this, &acquire, &release, &grads_ready, nullptr};
  }

  const dscore_model_hooks* hooks() const { return &hooks_; }
  TestTensor& param(size_t layer, size_t k) { return layers_[layer].params[k]; }
  TestTensor& grad(size_t layer, size_t k) { return layers_[layer].grads[k]; }
  size_t layer_count() const { return layers_.size(); }
  void zero_grads() {
    for (Layer& l : layers_)
      for (TestTensor& g : l.grads)
        for (int64_t e = 0; e < g.numel(); ++e) g.set(e, 0.0f);
  }

  std::vector<std::string> events;
  int held = 0;        // acquires not yet released
  int fail_call = -1;  // index into events of a hook call to fail

 private:
  struct Layer {
    std::vector<TestTensor> params, grads;
    std::vector<const dscore_tensor*> param_ptrs;
    std::vector<dscore_tensor*> grad_ptrs;
  };
  bool record(const std::string& e) {
    events.push_back(e);
    return static_cast<int>(events.size()) - 1 == fail_call;
  }
  static dscore_status acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                               dscore_layer_views* out) {
    auto* h = static_cast<HookHost*>(ctx);
    if (h->record((mode == DSCORE_ACQUIRE_FORWARD ? "acquire F " : "acquire B ") +
                  std::to_string(layer)))
      return FakeHost::instance().api()->set_error(FakeHost::thread_context(), DSCORE_UNAVAILABLE,
                                                   "injected acquire failure");
    ++h->held;
    Layer& l = h->layers_[layer];
    out->count = l.params.size();
    out->params = l.param_ptrs.data();
    out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? l.grad_ptrs.data() : nullptr;
    return DSCORE_OK;
  }
  static dscore_status release(void* ctx, size_t layer) {
    auto* h = static_cast<HookHost*>(ctx);
    --h->held;
    if (h->record("release " + std::to_string(layer)))
      return FakeHost::instance().api()->set_error(FakeHost::thread_context(), DSCORE_UNAVAILABLE,
                                                   "injected release failure");
    return DSCORE_OK;
  }
  static dscore_status grads_ready(void* ctx, size_t layer) {
    auto* h = static_cast<HookHost*>(ctx);
    if (h->record("grads_ready " + std::to_string(layer)))
      return FakeHost::instance().api()->set_error(FakeHost::thread_context(), DSCORE_DATA_LOSS,
                                                   "injected grads_ready failure");
    return DSCORE_OK;
  }

  std::vector<Layer> layers_;
  dscore_model_hooks hooks_{};
};

// A batch of the model's two inputs, x (B, in) and y (B, out).
struct Batch {
  Batch(int64_t b, int64_t in, int64_t out, dscore_dtype dtype = DSCORE_DTYPE_F32)
      : x(dtype, std::vector<int64_t>{b, in}), y(dtype, std::vector<int64_t>{b, out}) {
    ptrs[0] = x.view();
    ptrs[1] = y.view();
    batch = {sizeof(dscore_batch), b, 2, ptrs};
  }
  TestTensor x, y;
  const dscore_tensor* ptrs[2];
  dscore_batch batch;
};

class MlpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_MLP_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override { FakeHost::instance().clear_error(); }

  static const dscore_model_vtable* vt() {
    return lib_->vtable<dscore_model_vtable>(DSCORE_KIND_MODEL, "mlp");
  }
  static CreateArgs defaults() {
    return CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MODEL, "mlp"));
  }
  // A model whose destroy runs at scope exit.
  static std::shared_ptr<dscore_model> make(CreateArgs args) {
    dscore_model* m = nullptr;
    EXPECT_EQ(vt()->create(args.get(), &m), DSCORE_OK) << FakeHost::instance().last_error();
    return std::shared_ptr<dscore_model>(m, [](dscore_model* p) {
      if (p) vt()->destroy(p);
    });
  }
  static CreateArgs tiny(const char* activation) {
    CreateArgs a = defaults();
    a.integer("input_dim", 3)
        .integer("hidden_dim", 5)
        .integer("output_dim", 2)
        .integer("n_hidden_layers", 2)
        .string("activation", activation);
    return a;
  }
  static double loss_of(dscore_model* m, HookHost& host, Batch& b) {
    double loss = -1;
    EXPECT_EQ(vt()->forward(m, &b.batch, host.hooks(), &loss, nullptr), DSCORE_OK)
        << FakeHost::instance().last_error();
    return loss;
  }

  static TestPluginLibrary* lib_;
};
TestPluginLibrary* MlpTest::lib_ = nullptr;

TEST_F(MlpTest, DescribesLayersParamsAndInputs) {
  auto m = make(defaults());
  const dscore_model_description* d = nullptr;
  ASSERT_EQ(vt()->describe(m.get(), &d), DSCORE_OK);
  ASSERT_EQ(d->layer_count, 3u);  // 2 hidden + output
  EXPECT_EQ(d->hidden_size, 64);
  const int64_t dims[] = {16, 64, 64, 4};
  for (size_t l = 0; l < 3; ++l) {
    const dscore_model_layer* layer = d->layers[l];
    EXPECT_EQ(std::string(layer->name), "layers." + std::to_string(l));
    ASSERT_EQ(layer->param_count, 2u);
    const dscore_model_param* w = layer->params[0];
    const dscore_model_param* b = layer->params[1];
    EXPECT_EQ(std::string(w->name), "layers." + std::to_string(l) + ".weight");
    ASSERT_EQ(w->ndim, 2);
    EXPECT_EQ(w->shape[0], dims[l + 1]);
    EXPECT_EQ(w->shape[1], dims[l]);
    EXPECT_EQ(w->numel, dims[l + 1] * dims[l]);
    EXPECT_EQ(w->flags, 0u);
    EXPECT_EQ(std::string(b->name), "layers." + std::to_string(l) + ".bias");
    ASSERT_EQ(b->ndim, 1);
    EXPECT_EQ(b->shape[0], dims[l + 1]);
    EXPECT_EQ(b->flags, DSCORE_PARAM_NO_WEIGHT_DECAY);
  }
  ASSERT_EQ(d->input_count, 2u);
  EXPECT_STREQ(d->inputs[0]->name, "x");
  EXPECT_EQ(d->inputs[0]->dtype, DSCORE_DTYPE_F32);
  EXPECT_EQ(d->inputs[0]->shape[0], 16);
  EXPECT_STREQ(d->inputs[1]->name, "y");
  EXPECT_EQ(d->inputs[1]->shape[0], 4);

  CreateArgs linear = defaults();
  linear.integer("n_hidden_layers", 0);
  auto single = make(linear);
  ASSERT_EQ(vt()->describe(single.get(), &d), DSCORE_OK);
  EXPECT_EQ(d->layer_count, 1u);
  EXPECT_EQ(d->layers[0]->params[0]->shape[1], 16);
}

TEST_F(MlpTest, GradientsMatchCentralDifferences) {
  // Tolerance: norm-wise relative error per parameter tensor, 1e-3 (fp32
  // compute; the loss is accumulated in double). h = 1e-3.
  for (const char* act : {"tanh", "relu", "gelu"}) {
    SCOPED_TRACE(act);
    auto m = make(tiny(act));
    HookHost host(vt(), m.get());
    Batch b(4, 3, 2);
    ASSERT_EQ(vt()->synthetic_batch(m.get(), 7, 0, &b.batch), DSCORE_OK);
    double loss = 0;
    ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, host.hooks(), 1.0, &loss), DSCORE_OK)
        << FakeHost::instance().last_error();
    EXPECT_NEAR(loss, loss_of(m.get(), host, b), 1e-12);
    const double h = 1e-3;
    for (size_t l = 0; l < host.layer_count(); ++l) {
      for (size_t k = 0; k < 2; ++k) {
        TestTensor& p = host.param(l, k);
        double diff2 = 0, norm2 = 0;
        for (int64_t e = 0; e < p.numel(); ++e) {
          const float orig = p.get(e);
          p.set(e, static_cast<float>(orig + h));
          double up = loss_of(m.get(), host, b);
          p.set(e, static_cast<float>(orig - h));
          double down = loss_of(m.get(), host, b);
          p.set(e, orig);
          double fd = (up - down) / (2 * h);
          double g = host.grad(l, k).get(e);
          diff2 += (fd - g) * (fd - g);
          norm2 += fd * fd;
        }
        EXPECT_LT(std::sqrt(diff2 / norm2), 1e-3) << "layer " << l << (k ? " bias" : " weight");
      }
    }
  }
}

TEST_F(MlpTest, HooksAreCalledInTheDocumentedOrder) {
  auto m = make(tiny("gelu"));
  HookHost host(vt(), m.get());
  Batch b(2, 3, 2);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 1, 0, &b.batch), DSCORE_OK);
  double loss;
  ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, host.hooks(), 1.0, &loss), DSCORE_OK);
  const std::vector<std::string> expected = {
      "acquire F 0",   "release 0",   "acquire F 1",   "release 1",     "acquire F 2",
      "release 2",     "acquire B 2", "grads_ready 2", "release 2",     "acquire B 1",
      "grads_ready 1", "release 1",   "acquire B 0",   "grads_ready 0", "release 0"};
  EXPECT_EQ(host.events, expected);
  EXPECT_EQ(host.held, 0);
}

TEST_F(MlpTest, HookFailuresReturnTheHostStatusAfterReleasing) {
  auto m = make(tiny("tanh"));
  Batch b(2, 3, 2);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 1, 0, &b.batch), DSCORE_OK);
  // Fail at: forward acquire of layer 1, backward acquire of layer 1,
  // grads_ready of layer 2, a forward release.
  // events: the number of hook calls made (a failed grads_ready is followed
  // by the release of its layer; a failed acquire or release by nothing).
  const struct {
    int call;
    dscore_status status;
    const char* message;
    size_t events;
  } cases[] = {{2, DSCORE_UNAVAILABLE, "injected acquire failure", 3},
               {9, DSCORE_UNAVAILABLE, "injected acquire failure", 10},
               {7, DSCORE_DATA_LOSS, "injected grads_ready failure", 9},
               {1, DSCORE_UNAVAILABLE, "injected release failure", 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.call);
    HookHost host(vt(), m.get());
    host.fail_call = c.call;
    double loss;
    EXPECT_EQ(vt()->forward_backward(m.get(), &b.batch, host.hooks(), 1.0, &loss), c.status);
    EXPECT_EQ(FakeHost::instance().last_error(), c.message);  // not overwritten by the model
    EXPECT_EQ(host.held, 0) << "every acquire is released, also on error";
    EXPECT_EQ(host.events.size(), c.events);
  }
}

TEST_F(MlpTest, GradientsAreAddedAndScaleLinearlyWithLossScale) {
  auto m = make(tiny("gelu"));
  Batch b(5, 3, 2);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 3, 10, &b.batch), DSCORE_OK);
  HookHost one(vt(), m.get()), scaled(vt(), m.get());
  double loss1, loss2;
  ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, one.hooks(), 1.0, &loss1), DSCORE_OK);
  ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, scaled.hooks(), 1024.0, &loss2), DSCORE_OK);
  EXPECT_EQ(loss1, loss2);  // the reported loss is unscaled
  for (size_t l = 0; l < one.layer_count(); ++l)
    for (size_t k = 0; k < 2; ++k)
      for (int64_t e = 0; e < one.grad(l, k).numel(); ++e)  // a power of two scales exactly
        ASSERT_EQ(scaled.grad(l, k).get(e), 1024.0f * one.grad(l, k).get(e));
  // A second call adds into the same views (gradient accumulation).
  std::vector<float> first = one.grad(0, 0).values();
  ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, one.hooks(), 1.0, &loss1), DSCORE_OK);
  for (size_t e = 0; e < first.size(); ++e) EXPECT_EQ(one.grad(0, 0).get(e), 2.0f * first[e]);
}

TEST_F(MlpTest, AcceptsSixteenBitViews) {
  for (dscore_dtype dt : {DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16}) {
    SCOPED_TRACE(sdk::dtype_name(dt));
    auto m = make(tiny("relu"));
    Batch b(4, 3, 2);
    ASSERT_EQ(vt()->synthetic_batch(m.get(), 5, 0, &b.batch), DSCORE_OK);
    HookHost half(vt(), m.get(), dt, dt);
    // The fp32 reference computes on the same 16-bit-rounded parameters.
    HookHost full(vt(), m.get());
    for (size_t l = 0; l < full.layer_count(); ++l)
      for (size_t k = 0; k < 2; ++k)
        for (int64_t e = 0; e < full.param(l, k).numel(); ++e)
          full.param(l, k).set(e, half.param(l, k).get(e));
    double lh, lf;
    ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, half.hooks(), 1.0, &lh), DSCORE_OK)
        << FakeHost::instance().last_error();
    ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, full.hooks(), 1.0, &lf), DSCORE_OK);
    EXPECT_EQ(lh, lf);
    // Gradients start at 0, so the 16-bit gradient is the fp32 one rounded.
    TestTensor rounded(dt, 1);
    for (size_t l = 0; l < full.layer_count(); ++l)
      for (size_t k = 0; k < 2; ++k)
        for (int64_t e = 0; e < full.grad(l, k).numel(); ++e) {
          rounded.set(0, full.grad(l, k).get(e));
          ASSERT_EQ(half.grad(l, k).get(e), rounded.get(0));
        }
  }
}

TEST_F(MlpTest, InitParamIsDeterministicSliceableAndPyTorchScaled) {
  CreateArgs args = defaults();
  args.seed(99);
  auto m = make(args);
  auto same = make(args);
  args.seed(100);
  auto other = make(args);
  const dscore_model_description* d = nullptr;
  ASSERT_EQ(vt()->describe(m.get(), &d), DSCORE_OK);
  size_t index = 0;
  for (size_t l = 0; l < d->layer_count; ++l) {
    for (size_t k = 0; k < 2; ++k, ++index) {
      const dscore_model_param* p = d->layers[l]->params[k];
      SCOPED_TRACE(p->name);
      TestTensor full(DSCORE_DTYPE_F32, p->numel), again(DSCORE_DTYPE_F32, p->numel),
          reseeded(DSCORE_DTYPE_F32, p->numel);
      ASSERT_EQ(vt()->init_param(m.get(), index, 0, p->numel, full.view()), DSCORE_OK);
      ASSERT_EQ(vt()->init_param(same.get(), index, 0, p->numel, again.view()), DSCORE_OK);
      ASSERT_EQ(vt()->init_param(other.get(), index, 0, p->numel, reseeded.view()), DSCORE_OK);
      EXPECT_EQ(full.values(), again.values());
      EXPECT_NE(full.values(), reseeded.values());
      // Any slice equals the same elements of the full init.
      const int64_t chunk = 7;
      for (int64_t off = 0; off < p->numel; off += chunk) {
        int64_t n = std::min(chunk, p->numel - off);
        TestTensor part(DSCORE_DTYPE_F32, n);
        ASSERT_EQ(vt()->init_param(m.get(), index, off, n, part.view()), DSCORE_OK);
        for (int64_t e = 0; e < n; ++e) ASSERT_EQ(part.get(e), full.get(off + e));
      }
      // uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch.nn.Linear.
      const double bound = 1.0 / std::sqrt(static_cast<double>(d->layers[l]->params[0]->shape[1]));
      double sum = 0, max_abs = 0;
      for (float v : full.values()) {
        sum += v;
        max_abs = std::max(max_abs, std::abs(static_cast<double>(v)));
      }
      EXPECT_LE(max_abs, bound);
      if (p->numel >= 1000) {
        EXPECT_GT(max_abs, 0.95 * bound);
        EXPECT_LT(std::abs(sum / p->numel), 0.1 * bound);
      }
    }
  }
  TestTensor out(DSCORE_DTYPE_F32, 4);
  EXPECT_EQ(vt()->init_param(m.get(), index, 0, 4, out.view()), DSCORE_OUT_OF_RANGE);
  EXPECT_EQ(vt()->init_param(m.get(), 1, 62, 4, out.view()), DSCORE_OUT_OF_RANGE);  // bias has 64
}

TEST_F(MlpTest, SyntheticBatchIsDeterministicAndSliceable) {
  auto m = make(defaults());
  Batch whole(12, 16, 4), part(4, 16, 4), again(12, 16, 4), reseeded(12, 16, 4);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 42, 0, &whole.batch), DSCORE_OK);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 42, 5, &part.batch), DSCORE_OK);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 42, 0, &again.batch), DSCORE_OK);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 43, 0, &reseeded.batch), DSCORE_OK);
  EXPECT_EQ(whole.x.values(), again.x.values());
  EXPECT_EQ(whole.y.values(), again.y.values());
  EXPECT_NE(whole.x.values(), reseeded.x.values());
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t j = 0; j < 16; ++j)
      ASSERT_EQ(part.x.get(s * 16 + j), whole.x.get((5 + s) * 16 + j));
    for (int64_t j = 0; j < 4; ++j) ASSERT_EQ(part.y.get(s * 4 + j), whole.y.get((5 + s) * 4 + j));
  }
  // x ~ N(0, 1); y has roughly unit second moment.
  Batch big(2000, 16, 4);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 1, 0, &big.batch), DSCORE_OK);
  double sx = 0, sxx = 0, syy = 0;
  for (float v : big.x.values()) sx += v, sxx += double(v) * v;
  for (float v : big.y.values()) syy += double(v) * v;
  const double nx = 2000.0 * 16, ny = 2000.0 * 4;
  EXPECT_NEAR(sx / nx, 0.0, 0.03);
  EXPECT_NEAR(sxx / nx, 1.0, 0.05);
  EXPECT_NEAR(syy / ny, 1.0, 0.15);
}

TEST_F(MlpTest, ForwardWritesPredictionsAndLoss) {
  auto m = make(tiny("tanh"));
  HookHost host(vt(), m.get());
  Batch b(3, 3, 2);
  ASSERT_EQ(vt()->synthetic_batch(m.get(), 2, 0, &b.batch), DSCORE_OK);
  TestTensor pred(DSCORE_DTYPE_F32, std::vector<int64_t>{3, 2});
  double loss = -1;
  ASSERT_EQ(vt()->forward(m.get(), &b.batch, host.hooks(), &loss, pred.view()), DSCORE_OK);
  double sum = 0;
  for (int64_t k = 0; k < 6; ++k) sum += std::pow(double(pred.get(k)) - b.y.get(k), 2);
  EXPECT_NEAR(loss, sum / 6, 1e-12);
  // forward acquires FORWARD only and never reports gradients.
  for (const std::string& e : host.events) EXPECT_EQ(e.find("B"), std::string::npos) << e;
}

TEST_F(MlpTest, RejectsBatchesOfTheWrongShape) {
  auto m = make(tiny("tanh"));
  HookHost host(vt(), m.get());
  Batch b(3, 4, 2);  // x has 4 features, the model 3
  double loss;
  EXPECT_EQ(vt()->forward_backward(m.get(), &b.batch, host.hooks(), 1.0, &loss),
            DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("\"x\""), std::string::npos);
  EXPECT_TRUE(host.events.empty());
}

TEST_F(MlpTest, RejectsBadParams) {
  dscore_model* m = nullptr;
  CreateArgs a = defaults();
  a.integer("input_dim", 0);
  EXPECT_EQ(vt()->create(a.get(), &m), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("input_dim = 0 must be >= 1"),
            std::string::npos);
  a = defaults();
  a.string("activation", "swish");
  EXPECT_EQ(vt()->create(a.get(), &m), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("swish"), std::string::npos);
  EXPECT_EQ(m, nullptr);
}

// The synthetic task is learnable: 200 Adam steps (lr 1e-3, batch 32, fresh
// samples every step) with the built-in adam plugin take the loss from about
// 1 to well below 0.1.
TEST_F(MlpTest, SyntheticTaskIsLearnableWithAdam) {
  TestPluginLibrary adam_lib(DSCORE_ADAM_PLUGIN);
  auto* adam = adam_lib.vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "adam");
  CreateArgs oargs = CreateArgs::with_defaults(adam_lib.find(DSCORE_KIND_OPTIMIZER, "adam"));
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(adam->create(oargs.get(), &opt), DSCORE_OK);

  auto m = make(defaults());
  HookHost host(vt(), m.get());
  std::vector<dscore_tensor*> params, states_m, states_v;
  std::vector<const dscore_tensor*> grads;
  std::vector<TestTensor> moments;
  moments.reserve(4 * host.layer_count());
  for (size_t l = 0; l < host.layer_count(); ++l)
    for (size_t k = 0; k < 2; ++k) {
      params.push_back(host.param(l, k).view());
      grads.push_back(host.grad(l, k).view());
      moments.emplace_back(DSCORE_DTYPE_F32, host.param(l, k).numel());
      states_m.push_back(moments.back().view());
      moments.emplace_back(DSCORE_DTYPE_F32, host.param(l, k).numel());
      states_v.push_back(moments.back().view());
    }
  std::vector<dscore_tensor*> states = states_m;
  states.insert(states.end(), states_v.begin(), states_v.end());

  std::vector<double> losses;
  for (int64_t step = 1; step <= 200; ++step) {
    Batch b(32, 16, 4);
    ASSERT_EQ(vt()->synthetic_batch(m.get(), 1, (step - 1) * 32, &b.batch), DSCORE_OK);
    host.zero_grads();
    double loss;
    ASSERT_EQ(vt()->forward_backward(m.get(), &b.batch, host.hooks(), 1.0, &loss), DSCORE_OK);
    losses.push_back(loss);
    dscore_optimizer_hparams h{sizeof h, 1e-3, 0, 0, 0, 1.0, step, 1.0, 0};
    dscore_optimizer_step_args a{sizeof a,      &h,           params.size(),
                                 params.data(), grads.data(), 2,
                                 states.data(), nullptr,      nullptr};
    ASSERT_EQ(adam->step(opt, &a), DSCORE_OK) << FakeHost::instance().last_error();
  }
  adam->destroy(opt);
  double first = (losses[0] + losses[1] + losses[2]) / 3;
  double last = 0;
  for (size_t i = losses.size() - 10; i < losses.size(); ++i) last += losses[i] / 10;
  EXPECT_GT(first, 0.5);
  EXPECT_LT(first, 2.0);
  EXPECT_LT(last, 0.1) << "first " << first;
}

}  // namespace
}  // namespace dscore::testing
