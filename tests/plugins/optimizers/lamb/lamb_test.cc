// Tests of plugins/optimizers/lamb through the C ABI against a
// double-precision transcription of docs/deepspeed-reference.md#fusedlamb (FusedLamb) written
// here: per-tensor trust ratio |p| / |u| clamped to [min_coeff, max_coeff]
// (1 when a norm is 0), bias correction folded into the step size,
// eps inside or outside the sqrt; every size and dtype; WHOLE_TENSORS.
#include <map>
#include <string>

#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

// Single step in fp32: the parameter moves by step * r * u with the norms
// accumulated in double; u = m / (sqrt(v) + eps) carries a few fp32
// roundings and p - step * r * u may cancel, so p is within a few ulps of
// its terms: relative to max(|p|, 1). m: relative to max(|m|, 1) (mixed
// signs); v: positive terms, relative.
const Tolerance kTol{1e-6, 1.0, {1e-6, 1e-6}, {1.0, 1e-12}};

struct LambConfig {
  double weight_decay = 0, max_coeff = 10, min_coeff = 0.01;
  bool bias_correction = true, eps_inside_sqrt = false;
};

RefStep lamb_reference(const LambConfig& c) {
  return [c](RefTensor& t, const std::vector<double>& grad, const dscore_optimizer_hparams& h) {
    // The kernel receives betas as fp32 (as FusedLamb's): 1 - 0.999f differs
    // from 0.001 by 1.3e-5 relative, so the reference rounds them too.
    const double b1 = f32((h.override_mask & DSCORE_HPARAM_BETA1) ? h.beta1 : 0.9);
    const double b2 = f32((h.override_mask & DSCORE_HPARAM_BETA2) ? h.beta2 : 0.999);
    const double eps = 1e-8, wd = c.weight_decay * h.weight_decay_multiplier;
    const size_t n = t.p.size();
    std::vector<double> u(n);
    double w_norm = 0, u_norm = 0;
    for (size_t i = 0; i < n; ++i) {
      const double g = grad[i] * h.grad_scale;
      double& m = t.state[0][i];
      double& v = t.state[1][i];
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      u[i] = m / (c.eps_inside_sqrt ? std::sqrt(v + eps) : std::sqrt(v) + eps) + wd * t.p[i];
      w_norm += t.p[i] * t.p[i];
      u_norm += u[i] * u[i];
    }
    w_norm = std::sqrt(w_norm), u_norm = std::sqrt(u_norm);
    double r = (w_norm != 0 && u_norm != 0) ? w_norm / u_norm : 1.0;
    r = std::min(std::max(r, c.min_coeff), c.max_coeff);
    // FusedLamb's step size: corrections from the fp32 betas (raised in
    // double, rounded to fp32), the step size in fp32.
    const double t_ = static_cast<double>(h.step);
    const float cb1 = static_cast<float>((h.override_mask & DSCORE_HPARAM_BETA1) ? h.beta1 : 0.9);
    const float cb2 = static_cast<float>((h.override_mask & DSCORE_HPARAM_BETA2) ? h.beta2 : 0.999);
    const float bc1 = static_cast<float>(1 - std::pow(static_cast<double>(cb1), t_));
    const float bc2 = static_cast<float>(1 - std::pow(static_cast<double>(cb2), t_));
    const double step_size =
        c.bias_correction ? static_cast<float>(static_cast<float>(h.lr) * std::sqrt(bc2) / bc1)
                          : h.lr;
    for (size_t i = 0; i < n; ++i) t.p[i] -= step_size * r * u[i];
  };
}

class LambTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = std::make_unique<TestPluginLibrary>(DSCORE_LAMB_PLUGIN);
    vt_ = lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "Lamb");
    FakeHost::instance().clear_error();
  }
  CreateArgs args(const LambConfig& c) {
    CreateArgs a = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "lamb"));
    a.number("weight_decay", c.weight_decay)
        .number("max_coeff", c.max_coeff)
        .number("min_coeff", c.min_coeff)
        .boolean("bias_correction", c.bias_correction)
        .boolean("eps_inside_sqrt", c.eps_inside_sqrt);
    return a;
  }
  dscore_optimizer* create(const LambConfig& c) {
    CreateArgs a = args(c);
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
    return opt;
  }
  std::string create_error(CreateArgs a) {
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt_->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  }
  std::unique_ptr<TestPluginLibrary> lib_;
  const dscore_optimizer_vtable* vt_ = nullptr;
};

TEST_F(LambTest, MatchesFusedLambInEveryModeSizeAndDtype) {
  // The clamp [0.4, 0.5] and [3, 4] force the trust ratio to a bound.
  const LambConfig configs[] = {
      {}, {0.01}, {0.0, 0.5, 0.4}, {0.1, 4.0, 3.0, false}, {0.01, 10, 0.01, true, true}};
  for (const LambConfig& c : configs)
    for (dscore_dtype g : grad_dtypes()) {
      SCOPED_TRACE("wd " + std::to_string(c.weight_decay) + " coeff [" +
                   std::to_string(c.min_coeff) + ", " + std::to_string(c.max_coeff) + "]" +
                   (c.bias_correction ? "" : " no bias correction") +
                   (c.eps_inside_sqrt ? " eps inside sqrt" : ""));
      dscore_optimizer* opt = create(c);
      OptimizerHarness run(vt_, opt);
      run.setup(kAwkwardSizes, g, DSCORE_DTYPE_INVALID, 41,
                [](size_t slot) { return slot == 0 ? 0.05 : 0.01; });
      for (int64_t step = 1; step <= 3; ++step) {
        dscore_optimizer_hparams h = hparams(1e-2, step, 0.5);
        if (step == 2) {
          h.override_mask = DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2;
          h.beta1 = 0.85, h.beta2 = 0.99;
        }
        run.step(h, lamb_reference(c), kTol);
      }
      vt_->destroy(opt);
    }
}

TEST_F(LambTest, ZeroParametersUseATrustRatioOfOne) {
  dscore_optimizer* opt = create({});
  OptimizerHarness run(vt_, opt);
  run.setup({4097}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 2);
  TestTensor& p = const_cast<TestTensor&>(run.param(0));
  for (int64_t i = 0; i < p.numel(); ++i) p.set(i, 0.0f);
  run.step(hparams(1e-2, 1), lamb_reference({}), kTol);  // reference: r = 1
  vt_->destroy(opt);
}

TEST_F(LambTest, WritesTheSixteenBitCopy) {
  for (dscore_dtype out : copy_dtypes()) {
    dscore_optimizer* opt = create({0.01});
    OptimizerHarness run(vt_, opt);
    run.setup({1, 7, 4097}, DSCORE_DTYPE_BF16, out, 9);
    run.step(hparams(1e-3, 1), lamb_reference({0.01}), kTol);
    vt_->destroy(opt);
  }
}

TEST_F(LambTest, DeclaresWholeTensorsAndFusedLambDefaults) {
  const dscore_plugin_descriptor* d = lib_->find(DSCORE_KIND_OPTIMIZER, "lamb");
  EXPECT_TRUE(d->capabilities & DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS);
  std::map<std::string, SchemaField> by;
  for (const SchemaField& f : parse_params_schema(d->params_schema)) by[f.name] = f;
  EXPECT_EQ(by.at("lr").default_json, "0.001");
  EXPECT_EQ(by.at("betas").default_json, "[0.9,0.999]");
  EXPECT_EQ(by.at("eps").default_json, "1e-08");
  EXPECT_EQ(by.at("max_coeff").default_json, "10.0");
  EXPECT_EQ(by.at("min_coeff").default_json, "0.01");
  EXPECT_EQ(by.at("bias_correction").default_json, "true");
  EXPECT_EQ(by.at("eps_inside_sqrt").default_json, "false");
}

TEST_F(LambTest, RejectsBadParams) {
  CreateArgs a = args({});
  a.boolean("amsgrad", true);
  EXPECT_NE(create_error(a).find("amsgrad is not supported"), std::string::npos);
  a = args({0.0, 0.1, 0.5});
  EXPECT_NE(create_error(a).find("max_coeff = 0.1 must be >= min_coeff = 0.5"), std::string::npos);
  a = args({});
  a.numbers("betas", {0.9, 1.0});
  EXPECT_NE(create_error(a).find("betas[1] = 1 is out of range"), std::string::npos);
  a = args({});
  a.number("lr", -1e-3);
  EXPECT_NE(create_error(a).find("lr = -0.001 must be >= 0"), std::string::npos);
}

TEST_F(LambTest, DeclaresCudaExactlyWhenBuiltWithIt) {
  const uint64_t caps = lib_->find(DSCORE_KIND_OPTIMIZER, "lamb")->capabilities;
#if defined(DSCORE_LAMB_WITH_CUDA)
  EXPECT_TRUE(caps & DSCORE_CAP_CUDA);
#else
  EXPECT_FALSE(caps & DSCORE_CAP_CUDA);
#endif
  EXPECT_TRUE(caps & DSCORE_CAP_CPU);
}

// A one-tensor step whose tensors a test can break (no device memory is
// touched: every check runs before any work).
struct OneTensorStep {
  TestTensor p{DSCORE_DTYPE_F32, 4, "h.0.weight"}, g{DSCORE_DTYPE_F32, 4}, m{DSCORE_DTYPE_F32, 4},
      v{DSCORE_DTYPE_F32, 4};
  dscore_tensor* params[1] = {p.view()};
  const dscore_tensor* grads[1] = {g.view()};
  dscore_tensor* states[2] = {m.view(), v.view()};
  dscore_optimizer_hparams h{sizeof(dscore_optimizer_hparams), 1e-3, 0, 0, 0, 1, 1, 1, 0};
  dscore_optimizer_step_args a{
      sizeof(dscore_optimizer_step_args), &h, 1, params, grads, 2, states, nullptr, nullptr};
};

TEST_F(LambTest, RejectsTensorsItCannotUpdate) {
  dscore_optimizer* opt = create({});
  auto step_error = [&](OneTensorStep& s) {
    EXPECT_EQ(vt_->step(opt, &s.a), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  };
  {
    // A CUDA parameter with a CPU gradient: refused before anything runs
    // (with CUDA: the gradient must live beside its parameter; without:
    // the build has no CUDA path).
    OneTensorStep s;
    s.p.view()->device_type = DSCORE_DEVICE_CUDA;
    const std::string m = step_error(s);
    EXPECT_NE(m.find("h.0.weight"), std::string::npos) << m;
#if defined(DSCORE_LAMB_WITH_CUDA)
    EXPECT_NE(m.find("grad 0 is in CPU memory"), std::string::npos) << m;
#else
    EXPECT_NE(m.find("built without CUDA"), std::string::npos) << m;
#endif
  }
  {
    OneTensorStep s;
    s.p.view()->dtype = DSCORE_DTYPE_F16;
    EXPECT_NE(step_error(s).find("must be fp32"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.v.view()->numel = 3;
    EXPECT_NE(step_error(s).find("3 elements, expected 4"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.g.view()->dtype = DSCORE_DTYPE_I32;
    EXPECT_NE(step_error(s).find("int32"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.a.slot_count = 1;
    EXPECT_NE(step_error(s).find("expected 2 state slots"), std::string::npos);
  }
  vt_->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
