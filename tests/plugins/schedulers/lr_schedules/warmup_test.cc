// Tests of WarmupLR and WarmupDecayLR (plugins/schedulers/lr_schedules/
// warmup.cc) through the C ABI: values from the formulas of
// docs/deepspeed-reference.md#warmuplr and #warmupdecaylr, written out
// independently here, at many t; DeepSpeed's TestLrSchedule properties
// (docs/deepspeed-reference.md#deepspeed-unit-tests, compared with ==
// exactly as DeepSpeed's test does); exact values from DeepSpeed 0.19.8;
// per-group lists; errors and warnings.
#include <dscore/scheduler.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "schedule_fixture.h"

namespace dscore::testing {
namespace {

// Values built from the formula in a different order than the plugin
// (ln(t+1)/ln(N) vs DeepSpeed's (1/ln N)*ln(t+1)) agree within a few ulps.
constexpr double kUlpTol = 4e-16;

class WarmupTest : public ScheduleTest {
 protected:
  // Creates `name` for `groups` parameter groups of base lr 0.5.
  static std::unique_ptr<Instance> make(const char* name, CreateArgs& args, size_t groups = 1) {
    return ScheduleTest::make(name, args, std::vector<double>(groups, 0.5));
  }
};

// docs/deepspeed-reference.md#warmuplr: N = max(2, n); t < 0 -> min; gamma = ln(t+1)/ln(N) or t/N
// below N, else 1 (WarmupLR) or max(0, (T - t)/max(1, T - N)) (2.3).
double reference_lr(double min, double max, int64_t n, bool log, int64_t t, int64_t total = -1) {
  const int64_t N = std::max<int64_t>(2, n);
  if (t < 0) return min;
  double gamma;
  if (t < N)
    gamma = log ? std::log(t + 1.0) / std::log(static_cast<double>(N)) : double(t) / double(N);
  else if (total < 0)
    gamma = 1.0;
  else
    gamma = std::max(0.0, double(total - t) / std::max(1.0, double(total - N)));
  return min + (max - min) * gamma;
}

TEST_F(WarmupTest, WarmupSchedulesSetOnlyTheLr) {
  for (const char* name : {"WarmupLR", "WarmupDecayLR"}) {
    CreateArgs args = defaults(name);
    if (std::string(name) == "WarmupDecayLR") args.integer("total_num_steps", 20);
    auto s = make(name, args);
    for (int64_t t = -1; t < 25; ++t)
      EXPECT_EQ(s->point(t).set_mask, DSCORE_HPARAM_LR) << name << " t=" << t;
  }
}

TEST_F(WarmupTest, LogWarmupFollowsTheFormula) {
  CreateArgs args = defaults("WarmupLR");
  args.number("warmup_min_lr", 0.01).number("warmup_max_lr", 0.11).integer("warmup_num_steps", 10);
  auto s = make("WarmupLR", args);
  // Hand-computed anchors: ln(t+1)/ln(10) = log10(t+1).
  EXPECT_EQ(s->lr(-1), 0.01);
  EXPECT_EQ(s->lr(0), 0.01);
  EXPECT_NEAR(s->lr(1), 0.01 + 0.1 * 0.30102999566398120, 1e-15);
  EXPECT_NEAR(s->lr(4), 0.01 + 0.1 * 0.69897000433601886, 1e-15);
  EXPECT_NEAR(s->lr(9), 0.11, 1e-15);  // log reaches max at t = N - 1
  EXPECT_EQ(s->lr(10), 0.11);
  for (int64_t t = -3; t < 40; ++t)
    EXPECT_NEAR(s->lr(t), reference_lr(0.01, 0.11, 10, true, t), kUlpTol) << "t=" << t;
}

TEST_F(WarmupTest, LinearWarmupReachesMaxOneStepLater) {
  CreateArgs args = defaults("WarmupLR");
  args.number("warmup_min_lr", 0.0)
      .number("warmup_max_lr", 1.0)
      .integer("warmup_num_steps", 8)
      .string("warmup_type", "linear");
  auto s = make("WarmupLR", args);
  EXPECT_EQ(s->lr(0), 0.0);
  EXPECT_EQ(s->lr(2), 0.25);
  EXPECT_EQ(s->lr(4), 0.5);
  EXPECT_EQ(s->lr(7), 0.875);  // (N-1)/N at t = N - 1
  EXPECT_EQ(s->lr(8), 1.0);
  EXPECT_EQ(s->lr(1000), 1.0);
  for (int64_t t = -2; t < 30; ++t)
    EXPECT_NEAR(s->lr(t), reference_lr(0.0, 1.0, 8, false, t), kUlpTol) << "t=" << t;
}

TEST_F(WarmupTest, OneWarmupStepIsTreatedAsTwo) {
  for (const char* type : {"log", "linear"}) {
    SCOPED_TRACE(type);
    CreateArgs args = defaults("WarmupLR");
    args.number("warmup_min_lr", 0.2)
        .number("warmup_max_lr", 0.6)
        .integer("warmup_num_steps", 1)
        .string("warmup_type", type);
    auto s = make("WarmupLR", args);
    EXPECT_EQ(s->lr(0), 0.2);
    if (std::string(type) == "log")
      EXPECT_NEAR(s->lr(1), 0.6, 1e-15);  // ln 2 / ln 2
    else
      EXPECT_EQ(s->lr(1), 0.2 + (0.6 - 0.2) * 0.5);  // 1/2, not yet max
    EXPECT_EQ(s->lr(2), 0.6);
  }
}

// DeepSpeed 0.19 raises "ValueError: warmup_num_steps must be a positive
// integer, got 0" (WarmupLR, WarmupDecayLR, WarmupCosineLR); dscore refuses the
// same values at config time (schema "min": 1) and again at create.
TEST_F(WarmupTest, WarmupStepsBelowOneAreRefused) {
  for (int64_t n : {0, -5}) {
    for (const char* name : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) {
      SCOPED_TRACE(std::string(name) + " n=" + std::to_string(n));
      CreateArgs args = defaults(name);
      if (std::string(name) != "WarmupLR") args.integer("total_num_steps", 20);
      args.integer("warmup_num_steps", n);
      const std::string m = create_error(name, args);
      EXPECT_NE(m.find("warmup_num_steps = " + std::to_string(n) +
                       " is out of range: it must be an integer >= 1"),
                std::string::npos)
          << m;
    }
  }
}

// Values from DeepSpeed 0.19.8's own WarmupLR / WarmupDecayLR
// (deepspeed/runtime/lr_schedules.py) driving a torch Adam with the given
// group lrs: /work/ds-venv/bin/python, the lr read from the optimizer after
// the constructor (t = -1) and after each step(), printed with repr().
TEST_F(WarmupTest, MatchesDeepSpeedExactly) {
  // warmup_min_lr 0.01, 10 log steps, no warmup_max_lr, group lrs 0.5 and 0.02.
  CreateArgs args = defaults("WarmupLR");
  args.number("warmup_min_lr", 0.01).integer("warmup_num_steps", 10);
  auto s = ScheduleTest::make("WarmupLR", args, {0.5, 0.02});
  expect_trace(*s, {0.01, 0.01, 0.15750469787535076, 0.24378941481263458, 0.3050093957507015,
                    0.35249530212464913, 0.3912941126879853, 0.4240980396069858, 0.4525140936260522,
                    0.47757882962526915, 0.49999999999999994, 0.5, 0.5});
  expect_trace(*s,
               {0.01, 0.01, 0.013010299956639812, 0.014771212547196624, 0.016020599913279622,
                0.016989700043360187, 0.017781512503836437, 0.018450980400142567,
                0.019030899869919432, 0.01954242509439325, 0.019999999999999997, 0.02, 0.02},
               1);
  // WarmupDecayLR T 15, N 5, class defaults (0 -> 0.001; the optimizer's 0.5 is ignored).
  CreateArgs decay = defaults("WarmupDecayLR");
  decay.integer("total_num_steps", 15).integer("warmup_num_steps", 5);
  expect_trace(*make("WarmupDecayLR", decay),
               {0.0, 0.0, 0.00043067655807339306, 0.0006826061944859854, 0.0008613531161467861,
                0.001, 0.001, 0.0009000000000000001, 0.0008, 0.0007, 0.0006, 0.0005, 0.0004, 0.0003,
                0.0002, 0.0001, 0.0, 0.0});
}

TEST_F(WarmupTest, PerGroupListsAndScalarsBroadcast) {
  CreateArgs args = defaults("WarmupLR");
  args.numbers("warmup_min_lr", {0.0, 0.1, 0.2})
      .number("warmup_max_lr", 1.0)
      .integer("warmup_num_steps", 4)
      .string("warmup_type", "linear");
  auto s = make("WarmupLR", args, 3);
  for (size_t g = 0; g < 3; ++g) {
    double min = 0.1 * static_cast<double>(g);
    for (int64_t t = -1; t < 8; ++t)
      EXPECT_NEAR(s->lr(t, g), reference_lr(min, 1.0, 4, false, t), kUlpTol) << g << " " << t;
  }
  dscore_schedule_point p{};
  p.struct_size = sizeof p;
  EXPECT_EQ(s->vt->point_at(s->s, 0, 3, &p), DSCORE_OUT_OF_RANGE);
  EXPECT_NE(FakeHost::instance().last_error().find("3 groups"), std::string::npos);
}

TEST_F(WarmupTest, ListLengthMustMatchGroupCount) {
  CreateArgs args = defaults("WarmupLR");
  args.numbers("warmup_max_lr", {0.1, 0.2});
  std::string m = create_error("WarmupLR", args, 3);
  EXPECT_NE(m.find("warmup_max_lr has 2 values"), std::string::npos) << m;
  EXPECT_NE(m.find("3 parameter groups"), std::string::npos) << m;
  args = defaults("WarmupDecayLR");
  args.integer("total_num_steps", 10).numbers("warmup_min_lr", {0.1, 0.2, 0.3});
  m = create_error("WarmupDecayLR", args, 1);
  EXPECT_NE(m.find("warmup_min_lr has 3 values"), std::string::npos) << m;
}

TEST_F(WarmupTest, UnknownWarmupTypeWarnsAndUsesLog) {
  CreateArgs args = defaults("WarmupLR");
  args.string("warmup_type", "cosine").integer("warmup_num_steps", 10);
  auto s = make("WarmupLR", args);
  bool warned = false;
  for (const LogLine& l : FakeHost::instance().logs())
    warned |= l.level == DSCORE_LOG_WARNING &&
              l.message.find("Using unknown warmup_type: cosine") != std::string::npos;
  EXPECT_TRUE(warned);
  for (int64_t t = 0; t < 12; ++t)
    EXPECT_NEAR(s->lr(t), reference_lr(0.0, 0.5, 10, true, t), kUlpTol);  // max: optimizer lr
}

TEST_F(WarmupTest, DefaultsAndFirstIteration) {
  CreateArgs args = defaults("WarmupLR");
  auto s = make("WarmupLR", args);
  EXPECT_EQ(vt("WarmupLR")->first_iteration(s->s), -1);
  // DeepSpeed 0.19 defaults: 0 -> the optimizer's lr (0.5 here) over 1000 log steps.
  EXPECT_EQ(s->lr(-1), 0.0);
  EXPECT_NEAR(s->lr(999), 0.5, 1e-15);
  EXPECT_EQ(s->lr(1000), 0.5);
  args.integer("last_batch_iteration", 41);
  auto resumed = make("WarmupLR", args);
  EXPECT_EQ(vt("WarmupLR")->first_iteration(resumed->s), 41);
}

TEST_F(WarmupTest, WarmupDecayDecaysToMinNotZero) {
  CreateArgs args = defaults("WarmupDecayLR");
  args.number("warmup_min_lr", 0.1)
      .number("warmup_max_lr", 0.5)
      .integer("warmup_num_steps", 5)
      .integer("total_num_steps", 15)
      .string("warmup_type", "linear");
  auto s = make("WarmupDecayLR", args);
  EXPECT_NEAR(s->lr(5), 0.5, 1e-16);
  EXPECT_NEAR(s->lr(10), 0.1 + 0.4 * 0.5, 1e-16);  // (15-10)/(15-5)
  EXPECT_EQ(s->lr(15), 0.1);
  EXPECT_EQ(s->lr(100), 0.1);
  for (const char* type : {"log", "linear"}) {
    args.string("warmup_type", type);
    auto d = make("WarmupDecayLR", args);
    for (int64_t t = -1; t < 30; ++t)
      EXPECT_NEAR(d->lr(t), reference_lr(0.1, 0.5, 5, std::string(type) == "log", t, 15), kUlpTol)
          << type << " t=" << t;
  }
}

TEST_F(WarmupTest, WarmupDecayWithTotalBelowWarmupWarns) {
  CreateArgs args = defaults("WarmupDecayLR");
  args.number("warmup_min_lr", 0.0)
      .number("warmup_max_lr", 1.0)
      .integer("warmup_num_steps", 10)
      .integer("total_num_steps", 4);
  auto s = make("WarmupDecayLR", args);
  bool warned = false;
  for (const LogLine& l : FakeHost::instance().logs())
    warned |=
        l.message.find("total_num_steps 4 is less than warmup_num_steps 10") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_EQ(s->lr(10), 0.0);  // max(0, (4 - 10) / max(1, -6))
  // T == N: the span is clamped to 1, so the lr falls to min right at N.
  args.integer("total_num_steps", 10);
  auto e = make("WarmupDecayLR", args);
  EXPECT_EQ(e->lr(10), 0.0);
}

TEST_F(WarmupTest, WarmupDecayRequiresTotalNumSteps) {
  CreateArgs args = defaults("WarmupDecayLR");
  args.remove("total_num_steps");
  std::string m = create_error("WarmupDecayLR", args, 1);
  EXPECT_NE(m.find("total_num_steps"), std::string::npos) << m;
}

// DeepSpeed tests/unit/runtime/test_lr_schedulers.py::TestLrSchedule: lrs
// recorded after each of 2W steps (so lrs[i] is the value at t = i).
TEST_F(WarmupTest, DeepSpeedTestLrScheduleProperties) {
  for (int64_t W : {10, 15, 19, 33}) {
    for (const char* type : {"log", "linear"}) {
      SCOPED_TRACE(std::string(type) + " W=" + std::to_string(W));
      CreateArgs args = defaults("WarmupLR");
      args.number("warmup_min_lr", 0.1)
          .number("warmup_max_lr", 0.2)
          .integer("warmup_num_steps", W)
          .string("warmup_type", type);
      auto warm = make("WarmupLR", args);
      std::vector<double> lrs;
      for (int64_t i = 0; i < 2 * W; ++i) lrs.push_back(warm->lr(i));
      EXPECT_EQ(lrs[0], 0.1);
      EXPECT_EQ(lrs[W], 0.2);
      for (int64_t i = W; i < 2 * W; ++i) EXPECT_EQ(lrs[i], 0.2);

      CreateArgs dargs = defaults("WarmupDecayLR");
      dargs.number("warmup_min_lr", 0.1)
          .number("warmup_max_lr", 0.2)
          .integer("warmup_num_steps", W)
          .integer("total_num_steps", 2 * W)
          .string("warmup_type", type);
      auto decay = make("WarmupDecayLR", dargs);
      lrs.clear();
      for (int64_t i = 0; i < 2 * W; ++i) lrs.push_back(decay->lr(i));
      EXPECT_EQ(lrs[0], 0.1);
      EXPECT_EQ(lrs[W], 0.2);
      for (int64_t i = W + 1; i < 2 * W; ++i) EXPECT_LT(lrs[i], lrs[i - 1]) << i;
    }
  }
}

TEST_F(WarmupTest, SchemaMatchesDeepSpeedDefaults) {
  for (const char* name : {"WarmupLR", "WarmupDecayLR"}) {
    std::vector<SchemaField> fields =
        parse_params_schema(lib_->find(DSCORE_KIND_SCHEDULER, name)->params_schema);
    std::map<std::string, SchemaField> by_name;
    for (const SchemaField& f : fields) {
      EXPECT_FALSE(f.doc.empty()) << f.name;
      by_name[f.name] = f;
    }
    EXPECT_EQ(by_name.at("warmup_min_lr").default_json, "0.0");
    // WarmupLR: the optimizer's lr (no fixed default); WarmupDecayLR: 0.001.
    EXPECT_EQ(by_name.at("warmup_max_lr").default_json,
              std::string(name) == "WarmupLR" ? "" : "0.001");
    EXPECT_EQ(by_name.at("warmup_max_lr").auto_rule,
              std::string(name) == "WarmupLR" ? "default" : "optimizer_lr");
    EXPECT_EQ(by_name.at("warmup_num_steps").default_json, "1000");
    EXPECT_EQ(by_name.at("warmup_type").default_json, "\"log\"");
    EXPECT_EQ(by_name.at("last_batch_iteration").default_json, "-1");
    EXPECT_EQ(by_name.count("total_num_steps"), std::string(name) == "WarmupDecayLR" ? 1u : 0u);
  }
  std::vector<SchemaField> decay =
      parse_params_schema(lib_->find(DSCORE_KIND_SCHEDULER, "WarmupDecayLR")->params_schema);
  for (const SchemaField& f : decay)
    if (f.name == "total_num_steps") {
      EXPECT_TRUE(f.required);
      EXPECT_EQ(f.auto_rule, "train_steps");
    }
}

}  // namespace
}  // namespace dscore::testing
