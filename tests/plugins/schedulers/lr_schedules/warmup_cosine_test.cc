// WarmupCosineLR (plugins/schedulers/lr_schedules/warmup_cosine.cc) through
// the C ABI: hand-derived values and an independent formula from
// docs/deepspeed-reference.md#warmupcosinelr at many t, DeepSpeed's TestWarmupCosineLR properties
// (docs/deepspeed-reference.md#deepspeed-unit-tests), exact values from DeepSpeed 0.19.8, and
// what DeepSpeed changed after 0.16 (held at the floor after total_num_steps, every group 0 at
// construction, T <= N, unknown warmup_type).
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "schedule_fixture.h"

namespace dscore::testing {
namespace {

constexpr double kUlpTol = 1e-17;  // values here are ~1e-3: a few ulps

// docs/deepspeed-reference.md#warmupcosinelr written independently (ln(t+1)/ln N, and the cosine
// held at its end value past T).
double reference_lr(double peak, int64_t T, int64_t n, double cmr, double wmr, bool log,
                    int64_t t) {
  const int64_t N = std::max<int64_t>(2, n);
  if (t < 0) return 0.0;
  if (t < N) {
    const double w = log ? std::log(t + 1.0) / std::log(double(N)) : double(t) / double(N);
    return peak * (wmr + (1 - wmr) * w);
  }
  const double r = std::min<double>(t - N + 1, T - N), R = T - N;
  return peak * std::max(0.0, cmr + (1 - cmr) * 0.5 * (1 + std::cos(std::numbers::pi * r / R)));
}

class WarmupCosineTest : public ScheduleTest {};

std::unique_ptr<ScheduleTest::Instance> make_cosine(int64_t T, int64_t N, double cmr, double wmr,
                                                    const char* type = "log",
                                                    std::vector<double> base = {0.0015}) {
  CreateArgs args = ScheduleTest::defaults("WarmupCosineLR");
  args.integer("total_num_steps", T)
      .integer("warmup_num_steps", N)
      .number("cos_min_ratio", cmr)
      .number("warmup_min_ratio", wmr)
      .string("warmup_type", type);
  return ScheduleTest::make("WarmupCosineLR", args, base);
}

TEST_F(WarmupCosineTest, HandDerivedValues) {
  auto s = make_cosine(100, 10, 0.1, 0.2);
  EXPECT_EQ(s->lr(-1), 0.0);                     // the constructor's value
  EXPECT_NEAR(s->lr(0), 0.0015 * 0.2, kUlpTol);  // warmup_min_ratio * peak
  EXPECT_NEAR(s->lr(1), 0.0015 * (0.2 + 0.8 * 0.30102999566398120), kUlpTol);  // log10(2)
  EXPECT_NEAR(s->lr(9), 0.0015, kUlpTol);          // log warm-up peaks at N - 1
  EXPECT_NEAR(s->lr(54), 0.0015 * 0.55, kUlpTol);  // cos(pi/2): half way down
  EXPECT_NEAR(s->lr(99), 0.0015 * 0.1, kUlpTol);   // cos(pi) at T - 1
  auto linear = make_cosine(100, 10, 0.1, 0.2, "linear");
  EXPECT_NEAR(linear->lr(5), 0.0015 * (0.2 + 0.8 * 0.5), kUlpTol);
  EXPECT_NEAR(linear->lr(9), 0.0015 * (0.2 + 0.8 * 0.9), kUlpTol);  // linear: 0.9 at N - 1
  EXPECT_NEAR(linear->lr(10), 0.0015 * (0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 90))),
              kUlpTol);
}

TEST_F(WarmupCosineTest, FollowsTheFormulaAtManySteps) {
  for (const char* type : {"log", "linear"})
    for (auto [T, N, cmr, wmr] :
         {std::tuple{100, 10, 0.1, 0.2}, {600, 550, 0.0, 0.0}, {50, 1, 0.01, 0.5}}) {
      SCOPED_TRACE(std::string(type) + " T=" + std::to_string(T) + " N=" + std::to_string(N));
      auto s = make_cosine(T, N, cmr, wmr, type);
      for (int64_t t = -1; t < 3 * T; ++t)
        EXPECT_NEAR(s->lr(t), reference_lr(0.0015, T, N, cmr, wmr, std::string(type) == "log", t),
                    4 * kUlpTol)
            << "t=" << t;
    }
}

// DeepSpeed's TestWarmupCosineLR: lr recorded after each step, so lrs[i] is
// the value at t = i; optimizer lr 0.0015.
TEST_F(WarmupCosineTest, DeepSpeedTestWarmupCosineLrProperties) {
  const double opt_lr = 0.0015;
  for (auto [T, W, cmr, wmr] : {std::tuple{100, 10, 0.1, 0.2},
                                {200, 20, 0.1, 0.2},
                                {500, 30, 0.0, 0.2},
                                {600, 300, 0.1, 0.0},
                                {600, 550, 0.0, 0.0}}) {
    SCOPED_TRACE("T=" + std::to_string(T) + " W=" + std::to_string(W));
    auto s = make_cosine(T, W, cmr, wmr);
    std::vector<double> lrs;
    for (int64_t i = 0; i < T; ++i) lrs.push_back(s->lr(i));
    EXPECT_LT(std::abs(lrs[0] - opt_lr * wmr), 1e-7);
    EXPECT_LT(std::abs(lrs[W - 1] - opt_lr), 1e-7);
    EXPECT_LT(std::abs(lrs[T - 1] - opt_lr * cmr), 1e-7);
    for (int64_t i = 1; i < W; ++i) EXPECT_GT(lrs[i], lrs[i - 1]) << i;
    for (int64_t i = W + 1; i < T; ++i) EXPECT_LT(lrs[i], lrs[i - 1]) << i;
  }
}

TEST_F(WarmupCosineTest, PeakIsEachGroupsOptimizerLr) {
  auto s = make_cosine(40, 4, 0.25, 0.5, "linear", {0.4, 0.02});
  for (int64_t t = 0; t < 60; ++t) {
    EXPECT_DOUBLE_EQ(s->lr(t, 1) / 0.02, s->lr(t, 0) / 0.4) << t;
    EXPECT_NEAR(s->lr(t, 1), reference_lr(0.02, 40, 4, 0.25, 0.5, false, t), kUlpTol) << t;
  }
  // Every group is 0 at construction (DeepSpeed 0.16 set only group 0).
  EXPECT_EQ(s->lr(-1, 0), 0.0);
  EXPECT_EQ(s->lr(-1, 1), 0.0);
  EXPECT_EQ(s->point(0).set_mask, DSCORE_HPARAM_LR);
}

// DeepSpeed 0.19.3 on holds the end value after T (0.16's cosine rose again:
// at t = T - 1 + R / 2 it was back at the midpoint).
TEST_F(WarmupCosineTest, HoldsCosMinRatioAfterTotalNumSteps) {
  auto s = make_cosine(100, 10, 0.1, 0.2);
  for (int64_t t : {99, 100, 144, 189, 1000, 1000000}) EXPECT_NEAR(s->lr(t), 0.00015, kUlpTol) << t;
}

TEST_F(WarmupCosineTest, TotalNotAfterWarmupDropsToCosMinAndWarns) {
  auto s = make_cosine(10, 10, 0.3, 0.0, "linear");  // DeepSpeed 0.16: ZeroDivisionError at t = 10
  EXPECT_NEAR(s->lr(9), 0.0015 * 0.9, kUlpTol);
  EXPECT_NEAR(s->lr(10), 0.0015 * 0.3, kUlpTol);
  auto shorter = make_cosine(5, 10, 0.3, 0.0, "linear");
  EXPECT_TRUE(logged("total_num_steps 5 is less than warmup_num_steps 10"));
  EXPECT_NEAR(shorter->lr(50), 0.0015 * 0.3, kUlpTol);
}

// Values from DeepSpeed 0.19.8's own WarmupCosineLR
// (deepspeed/runtime/lr_schedules.py) on a torch Adam with the given group
// lrs: /work/ds-venv/bin/python, the lr read from the optimizer after the
// constructor (t = -1) and after each step(), printed with repr().
TEST_F(WarmupCosineTest, MatchesDeepSpeedExactly) {
  // T 20, N 4, linear, class-default ratios; past T the lr stays at 1e-4 x peak.
  expect_trace(*make_cosine(20, 4, 0.0001, 0.0, "linear"), {0.0,
                                                            0.0,
                                                            0.000375,
                                                            0.00075,
                                                            0.0011250000000000001,
                                                            0.0014855904014063927,
                                                            0.0014429153584185268,
                                                            0.0013736148490059862,
                                                            0.0012803520528813217,
                                                            0.0011667110069972252,
                                                            0.00103705887301639,
                                                            0.000896378109737945,
                                                            0.000750075,
                                                            0.0006037718902620551,
                                                            0.0004630911269836101,
                                                            0.000333438993002775,
                                                            0.0002197979471186784,
                                                            0.00012653515099401367,
                                                            5.72346415814733e-05,
                                                            1.4559598593607418e-05,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07,
                                                            1.5000000000000002e-07});
  // T == N == 10, log, cmr 0.3, wmr 0.1: straight to the floor after warm-up.
  expect_trace(*make_cosine(10, 10, 0.3, 0.1),
               {0.0, 0.00015000000000000001, 0.0005563904941463746, 0.0007941136938715441,
                0.0009627809882927491, 0.0010936095058536252, 0.0012005041880179187,
                0.0012908823540192466, 0.0013691714824391236, 0.0014382273877430883,
                0.0014999999999999998, 0.00045, 0.00045, 0.00045, 0.00045});
}

// DeepSpeed 0.19.4 on: an unknown warmup_type warns and means "log" (0.16 failed
// with an unbound variable during warm-up). Second group of (0.4, 0.02), T 12, N 5.
TEST_F(WarmupCosineTest, UnknownWarmupTypeWarnsAndUsesLog) {
  auto s = make_cosine(12, 5, 0.0001, 0.0, "cosine", {0.4, 0.02});
  EXPECT_TRUE(logged("Using unknown warmup_type: cosine"));
  expect_trace(
      *s,
      {0.0, 0.0, 0.00861353116146786, 0.013652123889719708, 0.01722706232293572, 0.02,
       0.019009787710156288, 0.016235274528785478, 0.012225986818629186, 0.007776013181370813,
       0.003766725471214524, 0.000992212289843712, 2.0000000000000003e-06, 2.0000000000000003e-06,
       2.0000000000000003e-06, 2.0000000000000003e-06, 2.0000000000000003e-06},
      1);
}

TEST_F(WarmupCosineTest, DefaultsAndErrors) {
  EXPECT_EQ(field("WarmupCosineLR", "cos_min_ratio").default_json, "1e-04");  // 0.0001
  EXPECT_EQ(field("WarmupCosineLR", "warmup_min_ratio").default_json, "0.0");
  EXPECT_EQ(field("WarmupCosineLR", "warmup_num_steps").default_json, "1000");
  EXPECT_EQ(field("WarmupCosineLR", "warmup_type").default_json, "\"log\"");
  // warmup_num_steps <= 0: DeepSpeed's ValueError (also WarmupTest.WarmupStepsBelowOneAreRefused).
  CreateArgs zero = defaults("WarmupCosineLR");
  zero.integer("total_num_steps", 10).integer("warmup_num_steps", 0);
  EXPECT_NE(create_error("WarmupCosineLR", zero).find("warmup_num_steps = 0 is out of range"),
            std::string::npos);
  EXPECT_EQ(field("WarmupCosineLR", "last_batch_iteration").default_json, "-1");
  EXPECT_TRUE(field("WarmupCosineLR", "total_num_steps").required);
  EXPECT_EQ(field("WarmupCosineLR", "total_num_steps").auto_rule, "train_steps");
  CreateArgs args = defaults("WarmupCosineLR");
  std::string m = create_error("WarmupCosineLR", args);
  EXPECT_NE(m.find("total_num_steps"), std::string::npos) << m;
  args.integer("total_num_steps", 5000).integer("last_batch_iteration", 7);
  auto s = make("WarmupCosineLR", args);
  EXPECT_EQ(s->first_iteration(), 7);
  EXPECT_NEAR(s->lr(999), 0.5, 1e-15);  // class defaults: log warm-up to the peak at 999
}

}  // namespace
}  // namespace dscore::testing
