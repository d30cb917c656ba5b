// Tests of the sdk example plugin sdk/examples/sgd_momentum/sgd_momentum.c
// (plain C) through the ABI: its update against a double-precision
// implementation of torch.optim.SGD (dampening 0) written here, its state
// slot, and the errors it reports through the host.
#include <dscore/optimizer.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {
namespace {

// Max error |p - ref| / max(|ref|, 1) of fp32 params after 5 steps against
// the double reference with the same fp32-rounded hyper-parameters. The
// floor is 1 because params (~N(0,1)) move by ~0.5 per step and a value that
// lands near 0 keeps the absolute rounding error of its larger past.
constexpr double kParamTol = 1e-6;

struct SgdCase {
  double lr = 0.05, momentum = 0.9, weight_decay = 0.0;
  bool nesterov = false;
  double grad_scale = 1.0, wd_multiplier = 1.0;
  bool override_momentum = false;  // hparams beta1 = 0.5
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;
};

class SgdMomentumExampleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_SGD_MOMENTUM_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override { FakeHost::instance().clear_error(); }
  static const dscore_optimizer_vtable* vt() {
    return lib_->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "sgd_momentum");
  }
  static CreateArgs defaults() {
    return CreateArgs::with_defaults(lib_->find(DSCORE_KIND_OPTIMIZER, "sgd_momentum"));
  }
  static TestPluginLibrary* lib_;
};
TestPluginLibrary* SgdMomentumExampleTest::lib_ = nullptr;

void run(const dscore_optimizer_vtable* vt, CreateArgs args, const SgdCase& s) {
  args.number("lr", s.lr)
      .number("momentum", s.momentum)
      .number("weight_decay", s.weight_decay)
      .boolean("nesterov", s.nesterov);
  dscore_optimizer* opt = nullptr;
  ASSERT_EQ(vt->create(args.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
  const dscore_optimizer_state_slot* const* slots = nullptr;
  size_t slot_count = 9;
  ASSERT_EQ(vt->state_slots(opt, &slots, &slot_count), DSCORE_OK);
  ASSERT_EQ(slot_count, s.momentum > 0 ? 1u : 0u);

  const int64_t n = 1000;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  TestTensor p(DSCORE_DTYPE_F32, n), g(s.grad_dtype, n), buf(DSCORE_DTYPE_F32, n);
  std::vector<double> ref_p(n), ref_buf(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    p.set(i, normal(rng));
    ref_p[i] = p.get(i);
  }
  auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  const double lr = f32(s.lr), wd = f32(s.weight_decay * s.wd_multiplier), gs = f32(s.grad_scale);
  const double mu = f32(s.override_momentum ? 0.5 : s.momentum);
  dscore_tensor* params[1] = {p.view()};
  const dscore_tensor* grads[1] = {g.view()};
  dscore_tensor* states[1] = {buf.view()};
  for (int64_t step = 1; step <= 5; ++step) {
    for (int64_t i = 0; i < n; ++i) g.set(i, normal(rng));
    dscore_optimizer_hparams h{
        sizeof h, s.lr,         s.override_momentum ? DSCORE_HPARAM_BETA1 : 0u,
        0.5,      0.0,          s.wd_multiplier,
        step,     s.grad_scale, 0};
    dscore_optimizer_step_args a{sizeof a,   &h,     1,       params, grads,
                                 slot_count, states, nullptr, nullptr};
    ASSERT_EQ(vt->step(opt, &a), DSCORE_OK) << FakeHost::instance().last_error();
    // torch.optim.SGD: d = g + wd p; buf = mu buf + d; d = nesterov ? d + mu buf : buf.
    for (int64_t i = 0; i < n; ++i) {
      double d = static_cast<double>(g.get(i)) * gs + wd * ref_p[i];
      if (s.momentum > 0) {
        ref_buf[i] = mu * ref_buf[i] + d;
        d = s.nesterov ? d + mu * ref_buf[i] : ref_buf[i];
      }
      ref_p[i] -= lr * d;
    }
  }
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(p.get(i) - ref_p[i]) / std::max(std::abs(ref_p[i]), 1.0));
  EXPECT_LT(worst, kParamTol);
  vt->destroy(opt);
}

TEST_F(SgdMomentumExampleTest, MatchesTorchSgdInDouble) {
  SgdCase base;
  {
    SCOPED_TRACE("momentum");
    run(vt(), defaults(), base);
  }
  SgdCase s = base;
  s.nesterov = true;
  {
    SCOPED_TRACE("nesterov");
    run(vt(), defaults(), s);
  }
  s = base;
  s.momentum = 0;
  {
    SCOPED_TRACE("plain SGD, no state");
    run(vt(), defaults(), s);
  }
  s = base;
  s.weight_decay = 0.01;
  {
    SCOPED_TRACE("weight decay");
    run(vt(), defaults(), s);
  }
  s.wd_multiplier = 0;
  {
    SCOPED_TRACE("no-decay parameter");
    run(vt(), defaults(), s);
  }
  s = base;
  s.grad_scale = 1.0 / 3;
  {
    SCOPED_TRACE("grad_scale");
    run(vt(), defaults(), s);
  }
  s = base;
  s.grad_dtype = DSCORE_DTYPE_BF16;
  {
    SCOPED_TRACE("bf16 grads");
    run(vt(), defaults(), s);
  }
  s = base;
  s.override_momentum = true;
  {
    SCOPED_TRACE("momentum from hparams beta1");
    run(vt(), defaults(), s);
  }
}

TEST_F(SgdMomentumExampleTest, DescriptorAndSchema) {
  const dscore_plugin_descriptor* d = lib_->find(DSCORE_KIND_OPTIMIZER, "SGD_Momentum");
  EXPECT_STREQ(d->name, "sgd_momentum");
  EXPECT_EQ(d->capabilities, DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_BF16);
  std::vector<SchemaField> fields = parse_params_schema(d->params_schema);
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[0].name, "lr");
  EXPECT_EQ(fields[0].default_json, "0.01");
  EXPECT_EQ(fields[1].name, "momentum");
  EXPECT_EQ(fields[1].default_json, "0.9");
  EXPECT_EQ(fields[2].name, "nesterov");
  EXPECT_EQ(fields[3].name, "weight_decay");
  EXPECT_STREQ(lib_->table()->name, "sgd-momentum-example");
}

TEST_F(SgdMomentumExampleTest, ReportsErrorsThroughTheHost) {
  CreateArgs args = defaults();
  args.number("momentum", 0).boolean("nesterov", true);
  dscore_optimizer* opt = nullptr;
  EXPECT_EQ(vt()->create(args.get(), &opt), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("Nesterov"), std::string::npos);
  args = defaults();
  args.number("lr", -1);
  EXPECT_EQ(vt()->create(args.get(), &opt), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("Invalid learning rate"), std::string::npos);

  args = defaults();
  ASSERT_EQ(vt()->create(args.get(), &opt), DSCORE_OK);
  TestTensor p(DSCORE_DTYPE_F32, 4, "w"), g(DSCORE_DTYPE_F16, 4), buf(DSCORE_DTYPE_F32, 4),
      p16(DSCORE_DTYPE_BF16, 4);
  dscore_tensor* params[1] = {p.view()};
  const dscore_tensor* grads[1] = {g.view()};
  dscore_tensor* states[1] = {buf.view()};
  dscore_optimizer_hparams h{sizeof h, 0.1, 0, 0, 0, 1, 1, 1, 0};
  dscore_optimizer_step_args a{sizeof a, &h, 1, params, grads, 1, states, nullptr, nullptr};
  EXPECT_EQ(vt()->step(opt, &a), DSCORE_UNIMPLEMENTED);
  EXPECT_NE(FakeHost::instance().last_error().find("fp16 gradients"), std::string::npos);
  EXPECT_NE(FakeHost::instance().last_error().find("'w'"), std::string::npos);
  // The 16-bit copy is optional: answered UNIMPLEMENTED so the host converts.
  dscore_tensor* out16[1] = {p16.view()};
  a.params_16bit = out16;
  EXPECT_EQ(vt()->step(opt, &a), DSCORE_UNIMPLEMENTED);
  a.params_16bit = nullptr;
  g.view()->dtype = DSCORE_DTYPE_F32;
  p.view()->device_type = DSCORE_DEVICE_CUDA;
  EXPECT_EQ(vt()->step(opt, &a), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(FakeHost::instance().last_error().find("CPU"), std::string::npos);
  vt()->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
