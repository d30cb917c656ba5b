// Tests of plugins/optimizers/sgd through the C ABI: every mode (plain,
// momentum, dampening, Nesterov, weight decay, maximize) against a
// double-precision transcription of torch.optim.SGD written here, on
// tensors of awkward sizes and every gradient / 16-bit copy dtype; state
// slots; errors; scheduler momentum overrides ignored as in DeepSpeed.
#include <string>

#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

// Single-step fp32 error against the double reference. Parameters ~N(0, 1)
// move by lr * g with lr up to 0.1, and p - lr * g may cancel: a few fp32
// roundings of the terms, so the error is relative to max(|p|, 1). The
// momentum buffer sums gradients of mixed sign: relative to max(|buf|, 1).
const Tolerance kTol{1e-6, 1.0, {1e-6}, {1.0}};

struct SgdConfig {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

RefStep sgd_reference(const SgdConfig& c) {
  return [c](RefTensor& t, const std::vector<double>& grad, const dscore_optimizer_hparams& h) {
    const double wd = c.weight_decay * h.weight_decay_multiplier;
    for (size_t i = 0; i < t.p.size(); ++i) {
      double g = grad[i] * (c.maximize ? -h.grad_scale : h.grad_scale);
      if (wd != 0) g += wd * t.p[i];
      if (c.momentum != 0) {
        double& buf = t.state[0][i];
        buf = h.step == 1 ? g : c.momentum * buf + (1 - c.dampening) * g;  // torch: clone first
        g = c.nesterov ? g + c.momentum * buf : buf;
      }
      t.p[i] -= h.lr * g;
    }
  };
}

class SgdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_SGD_PLUGIN);
    vt_ = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "SGD");
    FakeHost::instance().clear_error();
    FakeHost::instance().clear_logs();
  }
  CreateArgs args(const SgdConfig& c) {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "sgd"));
    a.number("momentum", c.momentum)
        .number("dampening", c.dampening)
        .number("weight_decay", c.weight_decay)
        .boolean("nesterov", c.nesterov)
        .boolean("maximize", c.maximize);
    return a;
  }
  dscore_optimizer* create(const SgdConfig& c) {
    CreateArgs a = args(c);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
    return opt;
  }
  std::string create_error(const SgdConfig& c) {
    CreateArgs a = args(c);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  }
  std::unique_ptr<TestPluginLibrary> lib_;
  const dscore_optimizer_vtable* vt_ = nullptr;
};

TEST_F(SgdTest, MatchesTorchSgdInEveryModeSizeAndDtype) {
  const SgdConfig configs[] = {{},
                               {0.9},
                               {0.9, 0.1},
                               {0.9, 0.0, 0.0, true},
                               {0.0, 0.0, 0.01},
                               {0.8, 0.2, 0.05, false, true},
                               {0.9, 0.0, 0.02, true}};
  for (const SgdConfig& c : configs)
    for (dscore_dtype g : grad_dtypes()) {
      SCOPED_TRACE("momentum " + std::to_string(c.momentum) + " dampening " +
                   std::to_string(c.dampening) + " wd " + std::to_string(c.weight_decay) +
                   (c.nesterov ? " nesterov" : "") + (c.maximize ? " maximize" : ""));
      dscore_optimizer* opt = create(c);
      OptimizerHarness run(vt_, opt);
      run.setup(kAwkwardSizes, g, DSCORE_DTYPE_INVALID, 17, [](size_t) { return 0.5; });
      for (int64_t step = 1; step <= 3; ++step) {
        dscore_optimizer_hparams h = hparams(0.1 / static_cast<double>(step), step, 0.5);
        h.weight_decay_multiplier = step == 2 ? 0.0 : 1.0;  // a no-decay group
        run.step(h, sgd_reference(c), kTol);
      }
      vt_->destroy(opt);
    }
}

TEST_F(SgdTest, WritesTheSixteenBitCopy) {
  for (dscore_dtype out : copy_dtypes()) {
    dscore_optimizer* opt = create({0.9});
    OptimizerHarness run(vt_, opt);
    run.setup({7, 4097}, DSCORE_DTYPE_BF16, out, 3);
    run.step(hparams(0.01, 1), sgd_reference({0.9}), kTol);
    vt_->destroy(opt);
  }
}

TEST_F(SgdTest, DeclaresAMomentumBufferOnlyWithMomentum) {
  for (double momentum : {0.0, 0.5}) {
    dscore_optimizer* opt = create({momentum});
    const dscore_optimizer_state_slot* const* slots = nullptr;
    size_t count = 9;
    ASSERT_EQ(vt_->state_slots(opt, &slots, &count), DSCORE_OK);
    ASSERT_EQ(count, momentum != 0 ? 1u : 0u);
    if (count == 1) {
      EXPECT_STREQ(slots[0]->name, "momentum_buffer");
      EXPECT_EQ(slots[0]->dtype, DSCORE_DTYPE_F32);
      EXPECT_EQ(slots[0]->initial_value, 0.0);
    }
    vt_->destroy(opt);
  }
}

TEST_F(SgdTest, IgnoresSchedulerMomentumAsDeepSpeedDoes) {
  dscore_optimizer* opt = create({0.9});
  OptimizerHarness run(vt_, opt);
  run.setup({4097}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 5, [](size_t) { return 0.2; });
  dscore_optimizer_hparams h = hparams(0.05, 2);
  h.override_mask = DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2;
  h.beta1 = 0.3;
  h.beta2 = 0.99;
  run.step(h, sgd_reference({0.9}), kTol);  // momentum stays 0.9
  bool warned = false;
  for (const LogLine& l : FakeHost::instance().logs())
    warned |= l.level == DSCORE_LOG_WARNING && l.message.find("sgd ignores") != std::string::npos;
  EXPECT_TRUE(warned);
  vt_->destroy(opt);
}

TEST_F(SgdTest, RejectsBadParams) {
  EXPECT_NE(create_error({0.0, 0.0, 0.0, true})
                .find("Nesterov momentum requires a momentum and zero dampening"),
            std::string::npos);
  EXPECT_NE(create_error({0.9, 0.1, 0.0, true}).find("Nesterov"), std::string::npos);
  EXPECT_NE(create_error({-0.5}).find("momentum = -0.5 must be >= 0"), std::string::npos);
  EXPECT_NE(create_error({0.0, 0.0, -1.0}).find("weight_decay = -1 must be >= 0"),
            std::string::npos);
  CreateArgs a = args({});
  a.number("lr", -0.1);
  dscore_optimizer* opt = nullptr;
  EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("lr = -0.1 must be >= 0"), std::string::npos);
}

TEST_F(SgdTest, SchemaDefaultsAreTorchs) {
  auto fields = parse_params_schema(lib_->find(DSCORE_KIND_OPTIMIZER, "sgd")->params_schema);
  std::map<std::string, SchemaField> by;
  for (const SchemaField& f : fields) by[f.name] = f;
  EXPECT_EQ(by.at("lr").default_json, "0.001");
  EXPECT_EQ(by.at("momentum").default_json, "0");
  EXPECT_EQ(by.at("dampening").default_json, "0");
  EXPECT_EQ(by.at("weight_decay").default_json, "0");
  EXPECT_EQ(by.at("nesterov").default_json, "false");
  EXPECT_EQ(by.count("max_grad_norm"), 1u);
}

}  // namespace
}  // namespace dscore::testing
