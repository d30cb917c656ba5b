// Tests of plugins/optimizers/lion through the C ABI against a
// double-precision transcription of DeepSpeed's Lion written here (sign of
// the interpolated momentum, decoupled decay on the pre-update parameter,
// momentum with beta2), on tensors of awkward sizes and every gradient /
// 16-bit copy dtype, with scheduler beta overrides; defaults; errors.
#include <map>
#include <string>

#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

// Single step in fp32. The parameter moves by exactly +-lr (or 0) after the
// decay factor: a few roundings of values ~1. The momentum mixes gradients
// of both signs: error relative to max(|m|, 1).
const Tolerance kTol{1e-6, 1e-2, {1e-6}, {1.0}};

RefStep lion_reference(double beta1, double beta2, double weight_decay) {
  return [=](RefTensor& t, const std::vector<double>& grad, const dscore_optimizer_hparams& h) {
    // fp32 betas, as the kernel receives them.
    const double b1 = f32((h.override_mask & DSCORE_HPARAM_BETA1) ? h.beta1 : beta1);
    const double b2 = f32((h.override_mask & DSCORE_HPARAM_BETA2) ? h.beta2 : beta2);
    const double wd = weight_decay * h.weight_decay_multiplier;
    for (size_t i = 0; i < t.p.size(); ++i) {
      const double g = grad[i] * h.grad_scale;
      double& m = t.state[0][i];
      const double c = b1 * m + (1 - b1) * g;
      // fp32 cannot decide the sign of a c that is ~0 next to its terms.
      const bool undecided = std::abs(c) < 1e-5 * (std::abs(b1 * m) + std::abs((1 - b1) * g));
      const double sign = c > 0 ? 1 : (c < 0 ? -1 : 0);
      t.p[i] = undecided ? std::nan("") : t.p[i] * (1 - h.lr * wd) - h.lr * sign;
      m = b2 * m + (1 - b2) * g;
    }
  };
}

class LionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_LION_PLUGIN);
    vt_ = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "Lion");
    FakeHost::instance().clear_error();
  }
  dscore_optimizer* create(double beta1, double beta2, double wd) {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "lion"));
    a.numbers("betas", {beta1, beta2}).number("weight_decay", wd);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
    return opt;
  }
  std::unique_ptr<TestPluginLibrary> lib_;
  const dscore_optimizer_vtable* vt_ = nullptr;
};

TEST_F(LionTest, MatchesTheReferenceInEveryModeSizeAndDtype) {
  for (double wd : {0.0, 0.1})
    for (dscore_dtype g : grad_dtypes()) {
      SCOPED_TRACE("weight_decay " + std::to_string(wd));
      dscore_optimizer* opt = create(0.9, 0.99, wd);
      OptimizerHarness run(vt_, opt);
      run.setup(kAwkwardSizes, g, DSCORE_DTYPE_INVALID, 31, [](size_t) { return 0.1; });
      for (int64_t step = 1; step <= 3; ++step) {
        dscore_optimizer_hparams h = hparams(1e-3 * static_cast<double>(step), step, 0.25);
        if (step == 3) {  // OneCycle's momentum override
          h.override_mask = DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2;
          h.beta1 = 0.85;
          h.beta2 = 0.99;
        }
        h.weight_decay_multiplier = step == 2 ? 0.0 : 1.0;
        run.step(h, lion_reference(0.9, 0.99, wd), kTol);
      }
      // Undecidable signs are rare: a handful among ~3M updates.
      EXPECT_LT(run.undecided(), 100u);
      vt_->destroy(opt);
    }
}

TEST_F(LionTest, WritesTheSixteenBitCopy) {
  for (dscore_dtype out : copy_dtypes()) {
    dscore_optimizer* opt = create(0.9, 0.999, 0.01);
    OptimizerHarness run(vt_, opt);
    run.setup({7, 4097}, DSCORE_DTYPE_F32, out, 8);
    run.step(hparams(1e-3, 1), lion_reference(0.9, 0.999, 0.01), kTol);
    vt_->destroy(opt);
  }
}

TEST_F(LionTest, DefaultsAreDeepSpeedsAndBadParamsAreRejected) {
  std::map<std::string, SchemaField> by;
  for (const SchemaField& f :
       parse_params_schema(lib_->find(DSCORE_KIND_OPTIMIZER, "lion")->params_schema))
    by[f.name] = f;
  EXPECT_EQ(by.at("lr").default_json, "0.001");
  EXPECT_EQ(by.at("betas").default_json, "[0.9,0.999]");  // FusedLion / DeepSpeedCPULion
  EXPECT_EQ(by.at("weight_decay").default_json, "0");
  for (auto [betas, text] : {std::pair{std::vector<double>{1.0, 0.9}, "betas[0] = 1"},
                             {std::vector<double>{0.9, -0.1}, "betas[1] = -0.1"}}) {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "lion"));
    a.numbers("betas", betas);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
    EXPECT_NE(FakeHost::instance().last_error().find(text), std::string::npos)
        << FakeHost::instance().last_error();
  }
  dscore_optimizer* opt = create(0.9, 0.99, 0.0);
  OptimizerHarness run(vt_, opt);
  run.setup({4}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 1);
  dscore_optimizer_hparams h = hparams(1e-3, 1);
  h.override_mask = DSCORE_HPARAM_BETA1;
  h.beta1 = 1.5;
  dscore_tensor* p[] = {const_cast<dscore_tensor*>(run.param(0).view())};
  TestTensor g(DSCORE_DTYPE_F32, 4);
  const dscore_tensor* gp[] = {g.view()};
  dscore_tensor* s[] = {run.state(0, 0).view()};
  dscore_optimizer_step_args a{sizeof a, &h, 1, p, gp, 1, s, nullptr, nullptr};
  EXPECT_EQ(vt_->step(opt, &a), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("beta1"), std::string::npos);
  vt_->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
