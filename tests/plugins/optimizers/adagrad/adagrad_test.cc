// Tests of plugins/optimizers/adagrad through the C ABI: lr decay, L2 weight
// decay, the initial accumulator and maximize against a double-precision
// transcription of torch.optim.Adagrad written here, on tensors of awkward
// sizes and every gradient / 16-bit copy dtype; the declared slot; errors.
#include <map>
#include <string>

#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

// Single step in fp32: the parameter moves by clr * g / (sqrt(sum) + eps)
// -> a few roundings of values ~1. The accumulator only grows (positive
// terms), but with weight decay g = s*grad + wd*p is formed in fp32 and can
// nearly cancel, so g*g carries up to ~30 ulps relative to the new term.
const Tolerance kTol{1e-6, 1e-2, {4e-6}, {1e-12}};

struct AdagradConfig {
  double lr_decay = 0, weight_decay = 0, initial = 0, eps = 1e-10;
  bool maximize = false;
};

RefStep adagrad_reference(const AdagradConfig& c) {
  return [c](RefTensor& t, const std::vector<double>& grad, const dscore_optimizer_hparams& h) {
    const double clr = h.lr / (1 + static_cast<double>(h.step - 1) * c.lr_decay);
    const double wd = c.weight_decay * h.weight_decay_multiplier;
    for (size_t i = 0; i < t.p.size(); ++i) {
      double g = grad[i] * (c.maximize ? -h.grad_scale : h.grad_scale);
      if (wd != 0) g += wd * t.p[i];
      double& sum = t.state[0][i];
      sum += g * g;
      t.p[i] -= clr * g / (std::sqrt(sum) + c.eps);
    }
  };
}

class AdagradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_ADAGRAD_PLUGIN);
    vt_ = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "Adagrad");
    FakeHost::instance().clear_error();
  }
  CreateArgs args(const AdagradConfig& c) {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "adagrad"));
    a.number("lr_decay", c.lr_decay)
        .number("weight_decay", c.weight_decay)
        .number("initial_accumulator_value", c.initial)
        .number("eps", c.eps)
        .boolean("maximize", c.maximize);
    return a;
  }
  dscore_optimizer* create(const AdagradConfig& c) {
    CreateArgs a = args(c);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
    return opt;
  }
  std::unique_ptr<TestPluginLibrary> lib_;
  const dscore_optimizer_vtable* vt_ = nullptr;
};

TEST_F(AdagradTest, MatchesTorchAdagradInEveryModeSizeAndDtype) {
  const AdagradConfig configs[] = {{}, {0.1}, {0.0, 0.01}, {0.05, 0.02, 0.1, 1e-6, true}};
  for (const AdagradConfig& c : configs)
    for (dscore_dtype g : grad_dtypes()) {
      SCOPED_TRACE("lr_decay " + std::to_string(c.lr_decay) + " wd " +
                   std::to_string(c.weight_decay) + " initial " + std::to_string(c.initial));
      dscore_optimizer* opt = create(c);
      OptimizerHarness run(vt_, opt);
      // The accumulator starts at initial_accumulator_value (the declared
      // slot's initial value) plus a history.
      run.setup(kAwkwardSizes, g, DSCORE_DTYPE_INVALID, 23, [](size_t) { return 0.3; });
      for (int64_t step = 1; step <= 3; ++step)
        run.step(hparams(0.01 * static_cast<double>(step), step, 0.7), adagrad_reference(c), kTol);
      vt_->destroy(opt);
    }
}

TEST_F(AdagradTest, WritesTheSixteenBitCopy) {
  for (dscore_dtype out : copy_dtypes()) {
    dscore_optimizer* opt = create({});
    OptimizerHarness run(vt_, opt);
    run.setup({1, 4097}, DSCORE_DTYPE_F16, out, 4);
    run.step(hparams(0.01, 1), adagrad_reference({}), kTol);
    vt_->destroy(opt);
  }
}

TEST_F(AdagradTest, DeclaresTheAccumulatorWithItsInitialValue) {
  dscore_optimizer* opt = create({0.0, 0.0, 0.25});
  const dscore_optimizer_state_slot* const* slots = nullptr;
  size_t count = 0;
  ASSERT_EQ(vt_->state_slots(opt, &slots, &count), DSCORE_OK);
  ASSERT_EQ(count, 1u);
  EXPECT_STREQ(slots[0]->name, "sum");
  EXPECT_EQ(slots[0]->dtype, DSCORE_DTYPE_F32);
  EXPECT_EQ(slots[0]->initial_value, 0.25);
  vt_->destroy(opt);
}

TEST_F(AdagradTest, RejectsNegativeValuesLikeTorch) {
  for (auto [name, value] : {std::pair{"lr", -1.0},
                             {"lr_decay", -0.1},
                             {"weight_decay", -0.01},
                             {"initial_accumulator_value", -1.0},
                             {"eps", -1e-10}}) {
    CreateArgs a = args({});
    a.number(name, value);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT) << name;
    EXPECT_NE(FakeHost::instance().last_error().find(std::string(name) + " = "), std::string::npos)
        << FakeHost::instance().last_error();
  }
}

TEST_F(AdagradTest, SchemaDefaultsAreTorchs) {
  std::map<std::string, SchemaField> by;
  for (const SchemaField& f :
       parse_params_schema(lib_->find(DSCORE_KIND_OPTIMIZER, "adagrad")->params_schema))
    by[f.name] = f;
  EXPECT_EQ(by.at("lr").default_json, "0.01");
  EXPECT_EQ(by.at("lr_decay").default_json, "0");
  EXPECT_EQ(by.at("weight_decay").default_json, "0");
  EXPECT_EQ(by.at("initial_accumulator_value").default_json, "0");
  EXPECT_EQ(by.at("eps").default_json, "1e-10");
}

}  // namespace
}  // namespace dscore::testing
