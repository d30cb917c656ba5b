// Tests of plugins/optimizers/muon through the C ABI: precondition()
// against DeepSpeed 0.19.8's own muon_update (compiled, on its CPU
// accelerator) on fixed matrices, both Newton-Schulz methods, wide, tall
// and square; which parameters are preconditioned; step() of both halves
// against a double-precision transcription; the learning-rate rules; bad
// params.
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor/tensor_view.h"
#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

struct Expected {
  const char* method;
  int rows, cols;
  std::vector<float> update;    // muon_update(g, m, beta=0.95, ns_method)
  std::vector<float> momentum;  // m after it
};

// Printed by DeepSpeed 0.19.8 (torch 2.15, DS_ACCELERATOR=cpu) for
// g[i][j] = ((7i + 3j) % 11 - 5) / 4 and m[i][j] = ((5i + 2j) % 7 - 3) / 8:
//   u = original_muon.muon_update(g, m, beta=0.95, ns_method=method)
const std::vector<Expected> kDeepSpeed = {
    {"gram",
     4,
     6,
     {-0x1.7700000000000p-1f, -0x1.ca80000000000p-3f, -0x1.24c0000000000p-9f,
      0x1.1e80000000000p-1f,  -0x1.51c0000000000p-2f, 0x1.cd80000000000p-4f,
      0x1.8a40000000000p-3f,  -0x1.b280000000000p-2f, -0x1.6780000000000p-2f,
      -0x1.7f40000000000p-6f, 0x1.3080000000000p-1f,  -0x1.55c0000000000p-2f,
      -0x1.1480000000000p-2f, 0x1.50c0000000000p-3f,  -0x1.1140000000000p-1f,
      -0x1.e000000000000p-4f, 0x1.0880000000000p-2f,  0x1.1040000000000p-1f,
      -0x1.77c0000000000p-3f, -0x1.b440000000000p-2f, 0x1.a440000000000p-2f,
      -0x1.4b40000000000p-1f, -0x1.3bc0000000000p-2f, -0x1.1980000000000p-5f},
     {-0x1.accccc0000000p-2f, -0x1.2666660000000p-3f, 0x1.0ccccc0000000p-3f,
      0x1.a000000000000p-2f,  -0x1.2666660000000p-2f, -0x1.99999a0000000p-7f,
      0x1.0ccccc0000000p-2f,  -0x1.2ccccc0000000p-2f, -0x1.4000000000000p-3f,
      0x1.e666660000000p-4f,  0x1.9333340000000p-2f,  -0x1.3333340000000p-2f,
      -0x1.99999a0000000p-6f, 0x1.0000000000000p-2f,  -0x1.39999a0000000p-2f,
      -0x1.59999a0000000p-3f, 0x1.b333340000000p-4f,  0x1.8666660000000p-2f,
      -0x1.6666660000000p-3f, -0x1.3333340000000p-5f, 0x1.e666660000000p-3f,
      -0x1.4666660000000p-2f, -0x1.7333340000000p-3f, 0x1.8000000000000p-4f}},
    {"gram",
     6,
     4,
     {-0x1.c4cca00000000p-1f, -0x1.0920c00000000p-2f, 0x1.6061a00000000p-5f,
      0x1.c569600000000p-1f,  0x1.3a1cc00000000p-3f,  -0x1.3f02c00000000p-1f,
      -0x1.5337800000000p-1f, -0x1.4437200000000p-4f, -0x1.012b000000000p-2f,
      0x1.9f24800000000p-3f,  -0x1.d901600000000p-1f, -0x1.9b29a00000000p-2f,
      -0x1.2fdb300000000p-4f, -0x1.bb00a00000000p-2f, 0x1.0b1e300000000p-1f,
      -0x1.53d4400000000p-1f, 0x1.3649100000000p-1f,  0x1.16c0700000000p-4f,
      0x1.fc84e00000000p-5f,  0x1.8919800000000p-2f,  0x1.9cb1800000000p-3f,
      0x1.ca01000000000p-1f,  -0x1.96e0600000000p-3f, 0x1.f9c3800000000p-5f},
     {-0x1.accccc0000000p-2f, -0x1.2666660000000p-3f, 0x1.0ccccc0000000p-3f,
      0x1.a000000000000p-2f,  0x1.0ccccc0000000p-2f,  -0x1.2ccccc0000000p-2f,
      -0x1.4000000000000p-3f, 0x1.e666660000000p-4f,  -0x1.99999a0000000p-6f,
      0x1.0000000000000p-2f,  -0x1.39999a0000000p-2f, -0x1.59999a0000000p-3f,
      -0x1.6666660000000p-3f, -0x1.3333340000000p-5f, 0x1.e666660000000p-3f,
      -0x1.4666660000000p-2f, 0x1.79999a0000000p-2f,  -0x1.8000000000000p-3f,
      -0x1.99999a0000000p-5f, 0x1.cccccc0000000p-3f,  0x1.4ccccc0000000p-4f,
      0x1.6ccccc0000000p-2f,  -0x1.99999a0000000p-3f, -0x1.0000000000000p-4f}},
    {"gram",
     4,
     4,
     {-0x1.9340000000000p-1f, -0x1.2340000000000p-2f, 0x1.06c0000000000p-6f, 0x1.3280000000000p-1f,
      0x1.0a00000000000p-2f, -0x1.3080000000000p-1f, -0x1.a000000000000p-2f, -0x1.9ec0000000000p-6f,
      -0x1.4480000000000p-2f, 0x1.78c0000000000p-2f, -0x1.9100000000000p-1f, -0x1.4ec0000000000p-2f,
      -0x1.57c0000000000p-3f, -0x1.0dc0000000000p-1f, 0x1.7540000000000p-2f,
      -0x1.37c0000000000p-1f},
     {-0x1.accccc0000000p-2f, -0x1.2666660000000p-3f, 0x1.0ccccc0000000p-3f, 0x1.a000000000000p-2f,
      0x1.0ccccc0000000p-2f, -0x1.2ccccc0000000p-2f, -0x1.4000000000000p-3f, 0x1.e666660000000p-4f,
      -0x1.99999a0000000p-6f, 0x1.0000000000000p-2f, -0x1.39999a0000000p-2f, -0x1.59999a0000000p-3f,
      -0x1.6666660000000p-3f, -0x1.3333340000000p-5f, 0x1.e666660000000p-3f,
      -0x1.4666660000000p-2f}},
    {"standard",
     4,
     6,
     {-0x1.7800000000000p-1f, -0x1.be00000000000p-3f, -0x1.5000000000000p-7f,
      0x1.2000000000000p-1f,  -0x1.4e00000000000p-2f, 0x1.e000000000000p-4f,
      0x1.8c00000000000p-3f,  -0x1.c000000000000p-2f, -0x1.5a00000000000p-2f,
      -0x1.1200000000000p-5f, 0x1.3400000000000p-1f,  -0x1.5c00000000000p-2f,
      -0x1.2200000000000p-2f, 0x1.6000000000000p-3f,  -0x1.1800000000000p-1f,
      -0x1.ee00000000000p-4f, 0x1.0800000000000p-2f,  0x1.1a00000000000p-1f,
      -0x1.6c00000000000p-3f, -0x1.ba00000000000p-2f, 0x1.a400000000000p-2f,
      -0x1.4a00000000000p-1f, -0x1.3000000000000p-2f, -0x1.4800000000000p-5f},
     {-0x1.accccc0000000p-2f, -0x1.2666660000000p-3f, 0x1.0ccccc0000000p-3f,
      0x1.a000000000000p-2f,  -0x1.2666660000000p-2f, -0x1.99999a0000000p-7f,
      0x1.0ccccc0000000p-2f,  -0x1.2ccccc0000000p-2f, -0x1.4000000000000p-3f,
      0x1.e666660000000p-4f,  0x1.9333340000000p-2f,  -0x1.3333340000000p-2f,
      -0x1.99999a0000000p-6f, 0x1.0000000000000p-2f,  -0x1.39999a0000000p-2f,
      -0x1.59999a0000000p-3f, 0x1.b333340000000p-4f,  0x1.8666660000000p-2f,
      -0x1.6666660000000p-3f, -0x1.3333340000000p-5f, 0x1.e666660000000p-3f,
      -0x1.4666660000000p-2f, -0x1.7333340000000p-3f, 0x1.8000000000000p-4f}},
    {"standard",
     6,
     4,
     {-0x1.cd30000000000p-1f, -0x1.0dd8000000000p-2f, 0x1.8880000000000p-6f,
      0x1.cd30000000000p-1f,  0x1.4b2c000000000p-3f,  -0x1.5288000000000p-1f,
      -0x1.5c58000000000p-1f, -0x1.07b6000000000p-4f, -0x1.1a1c000000000p-2f,
      0x1.aad8000000000p-3f,  -0x1.e344000000000p-1f, -0x1.a37c000000000p-2f,
      -0x1.3652000000000p-4f, -0x1.c848000000000p-2f, 0x1.104c000000000p-1f,
      -0x1.6140000000000p-1f, 0x1.48b8000000000p-1f,  0x1.afc0000000000p-5f,
      0x1.07b6000000000p-4f,  0x1.9c20000000000p-2f,  0x1.8d68000000000p-3f,
      0x1.de5c000000000p-1f,  -0x1.8af4000000000p-3f, 0x1.ef88000000000p-5f},
     {-0x1.accccc0000000p-2f, -0x1.2666660000000p-3f, 0x1.0ccccc0000000p-3f,
      0x1.a000000000000p-2f,  0x1.0ccccc0000000p-2f,  -0x1.2ccccc0000000p-2f,
      -0x1.4000000000000p-3f, 0x1.e666660000000p-4f,  -0x1.99999a0000000p-6f,
      0x1.0000000000000p-2f,  -0x1.39999a0000000p-2f, -0x1.59999a0000000p-3f,
      -0x1.6666660000000p-3f, -0x1.3333340000000p-5f, 0x1.e666660000000p-3f,
      -0x1.4666660000000p-2f, 0x1.79999a0000000p-2f,  -0x1.8000000000000p-3f,
      -0x1.99999a0000000p-5f, 0x1.cccccc0000000p-3f,  0x1.4ccccc0000000p-4f,
      0x1.6ccccc0000000p-2f,  -0x1.99999a0000000p-3f, -0x1.0000000000000p-4f}},
    {"standard",
     4,
     4,
     {-0x1.7600000000000p-1f, -0x1.0e00000000000p-2f, 0x1.7400000000000p-7f, 0x1.1e00000000000p-1f,
      0x1.0400000000000p-2f, -0x1.2400000000000p-1f, -0x1.8800000000000p-2f, -0x1.6800000000000p-6f,
      -0x1.4a00000000000p-2f, 0x1.8400000000000p-2f, -0x1.9200000000000p-1f, -0x1.4800000000000p-2f,
      -0x1.6800000000000p-3f, -0x1.0e00000000000p-1f, 0x1.7c00000000000p-2f,
      -0x1.3800000000000p-1f},
     {-0x1.accccc0000000p-2f, -0x1.2666660000000p-3f, 0x1.0ccccc0000000p-3f, 0x1.a000000000000p-2f,
      0x1.0ccccc0000000p-2f, -0x1.2ccccc0000000p-2f, -0x1.4000000000000p-3f, 0x1.e666660000000p-4f,
      -0x1.99999a0000000p-6f, 0x1.0000000000000p-2f, -0x1.39999a0000000p-2f, -0x1.59999a0000000p-3f,
      -0x1.6666660000000p-3f, -0x1.3333340000000p-5f, 0x1.e666660000000p-3f,
      -0x1.4666660000000p-2f}},
};

// Single step in fp32 against double: a few roundings of values ~1.
const Tolerance kTol{1e-6, 1e-2, {1e-6, 1e-6}, {1.0, 1.0}};

class MuonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_MUON_PLUGIN);
    vt_ = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "Muon");
    FakeHost::instance().clear_error();
  }
  CreateArgs args() { return CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "muon")); }
  dscore_optimizer* create(CreateArgs a) {
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
    return opt;
  }
  std::unique_ptr<TestPluginLibrary> lib_;
  const dscore_optimizer_vtable* vt_ = nullptr;
};

dscore_model_param param(const char* name, const std::vector<int64_t>& shape) {
  dscore_model_param p{};
  p.struct_size = sizeof p;
  p.name = name;
  p.ndim = static_cast<int32_t>(shape.size());
  p.shape = shape.data();
  p.numel = 1;
  for (int64_t d : shape) p.numel *= d;
  return p;
}

TEST_F(MuonTest, PreconditionIsDeepSpeedsMuonUpdate) {
  ASSERT_NE(vt_->precondition, nullptr);
  for (const Expected& e : kDeepSpeed) {
    SCOPED_TRACE(std::string(e.method) + " " + std::to_string(e.rows) + "x" +
                 std::to_string(e.cols));
    dscore_optimizer* opt = create(args().string("ns_method", e.method));
    const std::vector<int64_t> shape = {e.rows, e.cols};
    std::vector<float> g, m;
    for (int i = 0; i < e.rows; ++i)
      for (int j = 0; j < e.cols; ++j) {
        g.push_back(static_cast<float>((i * 7 + j * 3) % 11 - 5) / 4.0f);
        m.push_back(static_cast<float>((i * 5 + j * 2) % 7 - 3) / 8.0f);
      }
    const int64_t n = static_cast<int64_t>(g.size());
    dscore_tensor grad = tensor::host_view(g.data(), DSCORE_DTYPE_F32, shape, n);
    dscore_tensor state = tensor::host_view(m.data(), DSCORE_DTYPE_F32, shape, n);
    const dscore_model_param desc = param("layers.0.weight", shape);
    const dscore_optimizer_hparams h = hparams(0.02, 1);
    dscore_optimizer_precondition_args a{};
    a.struct_size = sizeof a;
    a.hparams = &h;
    a.param = &desc;
    a.grad = &grad;
    a.state = &state;
    ASSERT_EQ(vt_->precondition(opt, &a), DSCORE_OK) << FakeHost::instance().last_error();
    // Bitwise: these GEMMs are short enough (k <= 6) that the two
    // libraries sum in the same order; on larger matrices a rare element
    // is one step of the method's dtype apart (check_muon.py).
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_EQ(m[k], e.momentum[k]) << "momentum element " << k;
      EXPECT_EQ(g[k], e.update[k]) << "update element " << k;
    }
    vt_->destroy(opt);
  }
}

TEST_F(MuonTest, MatricesByDeepSpeedsRuleTakeMuon) {
  dscore_optimizer* opt = create(args());
  ASSERT_NE(vt_->preconditions, nullptr);
  const std::vector<int64_t> matrix = {8, 4}, vector = {8}, conv = {4, 2, 3, 3};
  auto takes = [&](const char* name, const std::vector<int64_t>& shape) {
    const dscore_model_param p = param(name, shape);
    return vt_->preconditions(opt, &p);
  };
  EXPECT_EQ(takes("h.0.attn.c_attn.weight", matrix), 1);
  EXPECT_EQ(takes("layers.0.conv.weight", conv), 1);
  EXPECT_EQ(takes("layers.0.bias", vector), 0);
  EXPECT_EQ(takes("model.embed_tokens.weight", matrix), 0);
  EXPECT_EQ(takes("Embedding.weight", matrix), 0);
  EXPECT_EQ(takes("lm_head.weight", matrix), 0);
  vt_->destroy(opt);
}

// p * (1 - lr wd) - lr * grad_scale * u for the matrices; FusedAdam's math
// (eps outside the square root) with Muon's defaults for the rest.
RefStep muon_reference(bool matrices, double lr, double wd, double beta1, double beta2,
                       double eps) {
  return [=](RefTensor& t, const std::vector<double>& grad, const dscore_optimizer_hparams& h) {
    const double decay = wd * h.weight_decay_multiplier;
    for (size_t i = 0; i < t.p.size(); ++i) {
      const double g = grad[i] * h.grad_scale;
      if (matrices) {
        t.p[i] = t.p[i] * f32(1 - lr * decay) - lr * g;
        continue;
      }
      double& m = t.state[0][i];
      double& v = t.state[1][i];
      m = beta1 * m + (1 - beta1) * g;
      v = beta2 * v + (1 - beta2) * g * g;
      const double bc1 = 1 - std::pow(f32(beta1), h.step), bc2 = 1 - std::pow(f32(beta2), h.step);
      t.p[i] -= lr * ((m / bc1) / (std::sqrt(v / bc2) + eps) + decay * t.p[i]);
    }
  };
}

TEST_F(MuonTest, StepAppliesEachHalfWithItsLearningRate) {
  for (bool matrices : {true, false}) {
    SCOPED_TRACE(matrices ? "preconditioned group" : "Adam group");
    dscore_optimizer* opt =
        create(args().number("muon_lr", 0.02).number("adam_lr", 1e-3).number("weight_decay", 0.1));
    OptimizerHarness run(vt_, opt);
    run.setup(kAwkwardSizes, DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, 7,
              [](size_t s) { return s == 0 ? 0.1 : 0.01; });
    for (int64_t step = 1; step <= 3; ++step) {
      // No "lr": the host schedules from muon_lr.
      dscore_optimizer_hparams h = hparams(0.02, step, 0.5);
      h.group_flags = matrices ? DSCORE_OPTIMIZER_GROUP_PRECONDITIONED : 0u;
      run.step(h, muon_reference(matrices, matrices ? 0.02 : 1e-3, 0.1, 0.9, 0.95, 1e-10), kTol);
    }
    vt_->destroy(opt);
  }
}

TEST_F(MuonTest, ASchedulerScalesEachHalfByItsRatioToLr) {
  dscore_optimizer* opt =
      create(args().number("lr", 0.01).number("muon_lr", 0.02).number("adam_lr", 1e-3));
  OptimizerHarness run(vt_, opt);
  run.setup({5, 33}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 3);
  dscore_optimizer_hparams h = hparams(0.005, 1);  // the scheduler halved lr
  h.group_flags = DSCORE_OPTIMIZER_GROUP_PRECONDITIONED;
  run.step(h, muon_reference(true, 0.01, 0, 0.9, 0.95, 1e-10), kTol);
  h.group_flags = 0;
  run.step(h, muon_reference(false, 5e-4, 0, 0.9, 0.95, 1e-10), kTol);
  vt_->destroy(opt);
}

TEST_F(MuonTest, BadParamsAreRefusedByName) {
  dscore_optimizer* opt = nullptr;
  CreateArgs per_head = args().boolean("per_head_muon", true);
  EXPECT_EQ(vt_->create(per_head.get(), &opt), DSCORE_UNIMPLEMENTED);
  EXPECT_NE(FakeHost::instance().last_error().find("per_head_muon"), std::string::npos);
  CreateArgs betas = args().numbers("betas", {0.9, 1.5});
  EXPECT_NE(vt_->create(betas.get(), &opt), DSCORE_OK);
  EXPECT_EQ(opt, nullptr);
}

}  // namespace
}  // namespace dscore::testing
