// Tests of plugins/optimizers/adam through the C ABI: the update against a
// straightforward double-precision implementation of docs/deepspeed-reference.md#fusedadam
// (FusedAdam) written here, for every mode and dtype the plugin accepts, and
// the errors a user sees for bad params or tensors.
#include <dscore/optimizer.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {
namespace {

// Tolerances, max relative error |x - ref| / max(|ref|, floor) against the
// double reference: the plugin computes in fp32 (as FusedAdam), so a few fp32
// roundings per element per step are expected.
constexpr double kParamTol = 3e-6;   // floor 1e-2 (params are ~N(0,1))
constexpr double kExpAvgTol = 3e-5;  // floor 1e-2 (terms of exp_avg cancel)
// floor 1e-12 (all terms positive). In L2 mode the decayed gradient
// s*g + wd*p is formed in fp32 and can nearly cancel; among 1M+3 random
// elements a few do, so its square carries ~30 fp32 ulps of error.
constexpr double kExpAvgSqTol = 4e-6;

const std::vector<int64_t> kSizes = {1, 7, 4097, (1 << 20) + 3};

// The reference: docs/deepspeed-reference.md#fusedadam in double. FusedAdam's kernel receives
// lr, betas, eps and weight decay as fp32 values (and 1 - beta is then exact),
// so the reference rounds those hyper-parameters to fp32 first: otherwise
// 1 - 0.999f alone differs from 0.001 by 1.3e-5 relative. Bias corrections
// are computed from those fp32 betas (raised in double, rounded to fp32), as
// FusedAdam's kernel launcher does.
struct RefConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool bias_correction = true, adamw = true;
};
struct RefState {
  std::vector<double> p, m, v;
};
void reference_step(const RefConfig& c, RefState& s, const std::vector<float>& grad, double lr,
                    double beta1, double beta2, double wd_multiplier, int64_t t,
                    double grad_scale) {
  auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  double bc1 = c.bias_correction ? f32(1 - std::pow(f32(beta1), t)) : 1;
  double bc2 = c.bias_correction ? f32(1 - std::pow(f32(beta2), t)) : 1;
  double wd = f32(c.weight_decay * wd_multiplier);
  lr = f32(lr);
  beta1 = f32(beta1);
  beta2 = f32(beta2);
  grad_scale = f32(grad_scale);
  const double eps = f32(c.eps);
  for (size_t i = 0; i < s.p.size(); ++i) {
    double g = static_cast<double>(grad[i]) * grad_scale;
    if (!c.adamw) g += wd * s.p[i];
    s.m[i] = beta1 * s.m[i] + (1 - beta1) * g;
    s.v[i] = beta2 * s.v[i] + (1 - beta2) * g * g;
    double update = (s.m[i] / bc1) / (std::sqrt(s.v[i] / bc2) + eps);
    if (c.adamw) update += wd * s.p[i];
    s.p[i] -= lr * update;
  }
}

double max_rel_err(const TestTensor& actual, const std::vector<double>& ref, double floor) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::abs(actual.get(static_cast<int64_t>(i)) - ref[i]) /
                                std::max(std::abs(ref[i]), floor));
  return worst;
}

class AdamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_ADAM_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override { FakeHost::instance().clear_error(); }

  static const dscore_optimizer_vtable* vt(const char* name) {
    return lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, name);
  }
  static CreateArgs defaults(const char* name) {
    return CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, name));
  }

  // Creates the optimizer, expecting failure; returns the host's message.
  static std::string create_error(const char* name, CreateArgs& args, dscore_status expected) {
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt(name)->create(args.get(), &opt), expected);
    EXPECT_EQ(opt, nullptr);
    return FakeHost::instance().last_error();
  }

  static TestPluginLibrary* lib_;
};
TestPluginLibrary* AdamTest::lib_ = nullptr;

struct Case {
  const char* label;
  const char* plugin = "adam";
  bool adam_w_mode = true;
  double weight_decay = 0;
  bool bias_correction = true;
  double grad_scale = 1;
  double wd_multiplier = 1;
  bool override_betas = false;
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;
  dscore_dtype out16 = DSCORE_DTYPE_INVALID;
  bool expect_adamw = true;
};

// Runs `steps` updates with fresh random gradients on three tensors of
// kSizes and compares params, moments and the 16-bit copy with the reference.
void run_case(const dscore_optimizer_vtable* vt, CreateArgs args, const Case& c) {
  SCOPED_TRACE(c.label);
  args.boolean("adam_w_mode", c.adam_w_mode)
      .number("weight_decay", c.weight_decay)
      .boolean("bias_correction", c.bias_correction)
      .numbers("betas", {0.9, 0.999})
      .number("eps", 1e-8);
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt->create(args.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
  std::unique_ptr<dscore_optimizer, void (*)(dscore_optimizer*)> guard(opt, vt->destroy);

  RefConfig rc;
  rc.weight_decay = c.weight_decay;
  rc.bias_correction = c.bias_correction;
  rc.adamw = c.expect_adamw;

  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = kSizes.size();
  std::vector<TestTensor> params, grads, ms, vs, outs;
  std::vector<RefState> ref(n);
  for (size_t i = 0; i < n; ++i) {
    params.emplace_back(DSCORE_DTYPE_F32, kSizes[i], "p");
    grads.emplace_back(c.grad_dtype, kSizes[i]);
    ms.emplace_back(DSCORE_DTYPE_F32, kSizes[i]);
    vs.emplace_back(DSCORE_DTYPE_F32, kSizes[i]);
    if (c.out16 != DSCORE_DTYPE_INVALID) outs.emplace_back(c.out16, kSizes[i]);
    for (int64_t j = 0; j < kSizes[i]; ++j) {
      params[i].set(j, normal(rng));
      ref[i].p.push_back(params[i].get(j));
    }
    ref[i].m.assign(kSizes[i], 0.0);
    ref[i].v.assign(kSizes[i], 0.0);
  }
  std::vector<dscore_tensor*> pp, mv, op;
  std::vector<const dscore_tensor*> gp;
  for (size_t i = 0; i < n; ++i) {
    pp.push_back(params[i].view());
    gp.push_back(grads[i].view());
    if (!outs.empty()) op.push_back(outs[i].view());
  }
  for (size_t i = 0; i < n; ++i) mv.push_back(ms[i].view());
  for (size_t i = 0; i < n; ++i) mv.push_back(vs[i].view());

  for (int64_t t = 1; t <= 6; ++t) {
    // Gradients of varying magnitude, so eps and the scale both matter.
    std::vector<std::vector<float>> gvals(n);
    for (size_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < kSizes[i]; ++j)
        grads[i].set(j, normal(rng) * (j % 3 == 0 ? 1e-3f : 2.0f));
      for (int64_t j = 0; j < kSizes[i]; ++j) gvals[i].push_back(grads[i].get(j));  // as stored
    }
    dscore_optimizer_hparams h{};
    h.struct_size = sizeof h;
    h.lr = 1e-3 * (1.0 + 0.5 * static_cast<double>(t));  // a schedule: lr varies per step
    h.override_mask = c.override_betas ? (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2) : 0u;
    h.beta1 = 0.8;
    h.beta2 = 0.99;
    h.weight_decay_multiplier = c.wd_multiplier;
    h.step = t;
    h.grad_scale = c.grad_scale;
    dscore_optimizer_step_args a{};
    a.struct_size = sizeof a;
    a.hparams = &h;
    a.tensor_count = n;
    a.params = pp.data();
    a.grads = gp.data();
    a.slot_count = 2;
    a.states = mv.data();
    a.params_16bit = op.empty() ? nullptr : op.data();
    ASSERT_EQ(vt->step(opt, &a), DSCORE_OK) << FakeHost::instance().last_error();
    double b1 = c.override_betas ? 0.8 : 0.9, b2 = c.override_betas ? 0.99 : 0.999;
    for (size_t i = 0; i < n; ++i)
      reference_step(rc, ref[i], gvals[i], h.lr, b1, b2, c.wd_multiplier, t, c.grad_scale);
  }
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("size " + std::to_string(kSizes[i]));
    EXPECT_LT(max_rel_err(params[i], ref[i].p, 1e-2), kParamTol);
    EXPECT_LT(max_rel_err(ms[i], ref[i].m, 1e-2), kExpAvgTol);
    EXPECT_LT(max_rel_err(vs[i], ref[i].v, 1e-12), kExpAvgSqTol);
    if (!outs.empty()) {
      // The 16-bit copy is exactly the fp32 result rounded to its dtype.
      TestTensor expect(c.out16, 1);
      for (int64_t e = 0; e < kSizes[i]; ++e) {
        expect.set(0, params[i].get(e));
        ASSERT_EQ(outs[i].get(e), expect.get(0)) << "element " << e;
      }
    }
  }
}

TEST_F(AdamTest, MatchesDoubleReferenceInEveryMode) {
  // expect_adamw is the DeepSpeed table (docs/deepspeed-reference.md#optimizer-names): AdamW iff
  // type is adamw or adam_w_mode.
  const Case cases[] = {
      {"adam defaults (AdamW)"},
      {"adam, adam_w_mode, weight decay", "adam", true, 0.1},
      {"adam, L2 mode", "adam", false, 0.1, true, 1, 1, false, DSCORE_DTYPE_F32,
       DSCORE_DTYPE_INVALID, false},
      {"adamw ignores adam_w_mode=false", "adamw", false, 0.1},
      {"adamw, weight_decay_multiplier 0", "adamw", true, 0.1, true, 1, 0.0},
      {"no bias correction", "adam", true, 0.01, false},
      {"L2 mode, no bias correction", "adam", false, 0.01, false, 1, 1, false, DSCORE_DTYPE_F32,
       DSCORE_DTYPE_INVALID, false},
      {"grad_scale 1/1024", "adam", true, 0.01, true, 1.0 / 1024},
      {"grad_scale 0.3 in L2 mode", "adam", false, 0.01, true, 0.3, 1, false, DSCORE_DTYPE_F32,
       DSCORE_DTYPE_INVALID, false},
      {"beta overrides (OneCycle)", "adam", true, 0.0, true, 1, 1, true},
      {"bf16 grads", "adam", true, 0.01, true, 1, 1, false, DSCORE_DTYPE_BF16},
      {"fp16 grads, scaled", "adam", true, 0.01, true, 0.5, 1, false, DSCORE_DTYPE_F16},
      {"bf16 params_16bit", "adam", true, 0.01, true, 1, 1, false, DSCORE_DTYPE_F32,
       DSCORE_DTYPE_BF16},
      {"fp16 params_16bit, bf16 grads", "adamw", true, 0.01, true, 1, 1, false, DSCORE_DTYPE_BF16,
       DSCORE_DTYPE_F16},
  };
  for (const Case& c : cases) run_case(vt(c.plugin), defaults(c.plugin), c);
}

TEST_F(AdamTest, DeclaresTwoFp32StateSlots) {
  dscore_optimizer* opt = nullptr;
  CreateArgs args = defaults("adam");
  ASSERT_EQ(vt("adam")->create(args.get(), &opt), DSCORE_OK);
  const dscore_optimizer_state_slot* const* slots = nullptr;
  size_t count = 0;
  ASSERT_EQ(vt("adam")->state_slots(opt, &slots, &count), DSCORE_OK);
  ASSERT_EQ(count, 2u);
  EXPECT_STREQ(slots[0]->name, "exp_avg");
  EXPECT_STREQ(slots[1]->name, "exp_avg_sq");
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(slots[i]->dtype, DSCORE_DTYPE_F32);
    EXPECT_EQ(slots[i]->elements_per_param, 1u);
    EXPECT_EQ(slots[i]->initial_value, 0.0);
  }
  vt("adam")->destroy(opt);
}

TEST_F(AdamTest, SchemaDeclaresDeepSpeedDefaults) {
  for (const char* name : {"adam", "adamw"}) {
    const dscore_plugin_descriptor* d = lib_->find(DSCORE_KIND_OPTIMIZER, name);
#if defined(DSCORE_ADAM_WITH_CUDA)
    EXPECT_EQ(d->capabilities,
              DSCORE_CAP_CPU | DSCORE_CAP_CUDA | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16);
#else
    EXPECT_EQ(d->capabilities, DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16);
#endif
    std::vector<SchemaField> fields = parse_params_schema(d->params_schema);
    auto get = [&](const std::string& n) -> const SchemaField& {
      for (const SchemaField& f : fields)
        if (f.name == n) return f;
      throw std::runtime_error("no schema field " + n);
    };
    EXPECT_EQ(get("lr").default_json, "0.001");
    EXPECT_EQ(get("lr").auto_rule, "default");
    EXPECT_EQ(get("betas").default_json, "[0.9,0.999]");  // serialized canonically
    EXPECT_EQ(get("eps").default_json, "1e-08");
    EXPECT_EQ(get("weight_decay").default_json, "0");
    EXPECT_EQ(get("bias_correction").default_json, "true");
    EXPECT_EQ(get("adam_w_mode").default_json, "true");
    EXPECT_EQ(get("amsgrad").default_json, "false");
    EXPECT_EQ(get("torch_adam").default_json, "false");
    for (const SchemaField& f : fields) EXPECT_FALSE(f.doc.empty()) << f.name;
  }
}

TEST_F(AdamTest, RejectsAmsgrad) {
  CreateArgs args = defaults("adam");
  args.boolean("amsgrad", true);
  EXPECT_NE(create_error("adam", args, DSCORE_INVALID_ARGUMENT)
                .find("amsgrad is not supported (DeepSpeed's FusedAdam rejects it too)"),
            std::string::npos);
}

TEST_F(AdamTest, RejectsBetasOutOfRange) {
  CreateArgs args = defaults("adamw");
  args.numbers("betas", {1.0, 0.999});
  std::string message = create_error("adamw", args, DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(message.find("betas[0] = 1"), std::string::npos) << message;
  EXPECT_NE(message.find("[0, 1)"), std::string::npos) << message;
  args.numbers("betas", {0.9, -0.5});
  message = create_error("adamw", args, DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(message.find("betas[1] = -0.5"), std::string::npos) << message;
  args.numbers("betas", {0.9, 0.99, 0.9});
  message = create_error("adamw", args, DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(message.find("two numbers"), std::string::npos) << message;
}

TEST_F(AdamTest, TorchAdamIsAcceptedAndLogged) {
  FakeHost::instance().clear_logs();
  CreateArgs args = defaults("adam");
  args.boolean("torch_adam", true);
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt("adam")->create(args.get(), &opt), DSCORE_OK);
  vt("adam")->destroy(opt);
  bool logged = false;
  for (const LogLine& l : FakeHost::instance().logs())
    logged |= l.message.find("torch_adam has no effect") != std::string::npos;
  EXPECT_TRUE(logged);
}

// A one-tensor step whose tensors a test can break.
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

TEST_F(AdamTest, RejectsTensorsItCannotUpdate) {
  CreateArgs args = defaults("adam");
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt("adam")->create(args.get(), &opt), DSCORE_OK);
  auto step_error = [&](OneTensorStep& s) {
    EXPECT_EQ(vt("adam")->step(opt, &s.a), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  };
  {
    OneTensorStep s;
    s.p.view()->device_type = DSCORE_DEVICE_CUDA;
    std::string m = step_error(s);
    EXPECT_NE(m.find("h.0.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("CPU"), std::string::npos) << m;
  }
  {
    OneTensorStep s;
    s.p.view()->dtype = DSCORE_DTYPE_F16;
    EXPECT_NE(step_error(s).find("must be fp32"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.g.view()->numel = 3;
    EXPECT_NE(step_error(s).find("3 elements, expected 4"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.g.view()->dtype = DSCORE_DTYPE_I32;
    EXPECT_NE(step_error(s).find("int32"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.h.step = 0;
    EXPECT_NE(step_error(s).find("must be >= 1"), std::string::npos);
  }
  {
    OneTensorStep s;
    s.h.override_mask = DSCORE_HPARAM_BETA2;
    s.h.beta2 = 1.0;
    EXPECT_NE(step_error(s).find("beta2"), std::string::npos);
  }
  vt("adam")->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
