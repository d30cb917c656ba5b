// OneCycle (plugins/schedulers/lr_schedules/one_cycle.cc) through the C ABI: hand-derived lr and
// momentum values from docs/deepspeed-reference.md#onecycle, the constructor value (lr = min,
// betas = (cycle_min_mom, 0.99)), the decay phase, DeepSpeed's TestOneCycle test_lr / test_mom
// properties (docs/deepspeed-reference.md#deepspeed-unit-tests, compared exactly where DeepSpeed
// does), and exact values from DeepSpeed 0.19.8 for stair counts, an empty second half and
// per-group lists.
#include <string>
#include <tuple>
#include <vector>

#include "schedule_fixture.h"

namespace dscore::testing {
namespace {

constexpr double kTol = 1e-17;

class OneCycleTest : public ScheduleTest {
 protected:
  static std::unique_ptr<Instance> cycle(CreateArgs args, double min_lr, double max_lr,
                                         int64_t first) {
    args.number("cycle_min_lr", min_lr)
        .number("cycle_max_lr", max_lr)
        .integer("cycle_first_step_size", first);
    return make("OneCycle", args);
  }
};

TEST_F(OneCycleTest, ConstructorSetsMinLrAndMinMomentumWithBeta2Of099) {
  auto s = cycle(defaults("OneCycle"), 0.001, 0.01, 4);
  const dscore_schedule_point p = s->point(-1);
  EXPECT_EQ(p.set_mask, DSCORE_HPARAM_LR | DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2);
  EXPECT_EQ(p.lr, 0.001);
  EXPECT_EQ(p.beta1, 0.8);
  EXPECT_EQ(p.beta2, 0.99);
}

TEST_F(OneCycleTest, HandDerivedCycle) {
  // S = 4 + 4, rho = 1/2; b = t + 1, x = b/8 - floor(b/8) within the cycle.
  auto s = cycle(defaults("OneCycle"), 0.001, 0.01, 4);
  struct Row {
    int64_t t;
    double scale;  // 0 at the ends of the cycle, 1 at the peak
  };
  for (Row r :
       {Row{0, 0.25}, {1, 0.5}, {2, 0.75}, {3, 1.0}, {4, 0.75}, {5, 0.5}, {6, 0.25}, {7, 0.0}}) {
    const dscore_schedule_point p = s->point(r.t);
    EXPECT_NEAR(p.lr, 0.001 + 0.009 * r.scale, kTol) << r.t;
    EXPECT_NEAR(p.beta1, 0.9 - 0.1 * r.scale, 4e-16) << r.t;
    EXPECT_EQ(p.beta2, 0.99) << r.t;
  }
  // Without decay the lr stays at min and beta1 at max after the cycle.
  for (int64_t t : {8, 9, 100}) {
    EXPECT_EQ(s->point(t).lr, 0.001);
    EXPECT_EQ(s->point(t).beta1, 0.9);
  }
}

TEST_F(OneCycleTest, UnevenHalvesAndDefaultSecondStepSize) {
  CreateArgs args = defaults("OneCycle");
  args.integer("cycle_second_step_size", 6);
  auto s = cycle(args, 0.0, 1.0, 2);  // S = 8, rho = 1/4
  EXPECT_EQ(s->lr(0), 0.5);
  EXPECT_EQ(s->lr(1), 1.0);
  EXPECT_EQ(s->lr(4), 0.5);  // x = 5/8: (5/8 - 1) / (1/4 - 1)
  EXPECT_NEAR(s->lr(6), 1.0 / 6.0, 1e-16);
  auto same = cycle(defaults("OneCycle"), 0.0, 1.0, 2);  // second = first: S = 4
  EXPECT_EQ(same->lr(2), 0.5);
  EXPECT_EQ(same->lr(3), 0.0);
}

TEST_F(OneCycleTest, DecayPhaseIsContinuousAndMomentumGrows) {
  CreateArgs args = defaults("OneCycle");
  args.number("decay_lr_rate", 0.5).integer("decay_step_size", 2).number("decay_mom_rate", 0.1);
  auto s = cycle(args, 0.001, 0.01, 4);
  // d = t - 8 + 1; lr = min / (1 + 0.5 d / 2); beta1 = 0.9 (1 + 0.1 d / 2).
  EXPECT_NEAR(s->lr(8), 0.001 / 1.25, kTol);
  EXPECT_NEAR(s->lr(9), 0.001 / 1.5, kTol);  // no stairs: every step changes
  EXPECT_NEAR(s->lr(11), 0.0005, kTol);
  EXPECT_NEAR(s->point(8).beta1, 0.945, 4e-16);
  EXPECT_NEAR(s->point(11).beta1, 1.08, 1e-15);
  EXPECT_EQ(s->point(11).beta2, 0.99);
}

// The traces below are DeepSpeed 0.19.8's own OneCycle
// (deepspeed/runtime/lr_schedules.py) on a torch Adam with the given group
// lrs: /work/ds-venv/bin/python, lr and betas[0] read from the optimizer after
// the constructor (t = -1) and after each step(), printed with repr().

TEST_F(OneCycleTest, StairCountsHoldLrAndMomentumFlatMatchingDeepSpeed) {
  CreateArgs args = defaults("OneCycle");
  args.integer("cycle_first_stair_count", 3);  // the second half defaults to 3 stairs too
  auto s = cycle(args, 0.001, 0.01, 10);
  expect_trace(
      *s,
      {0.001, 0.001, 0.001, 0.001, 0.004, 0.004, 0.004, 0.007, 0.007, 0.007, 0.010000000000000002,
       0.007, 0.007, 0.007, 0.004, 0.004, 0.004, 0.001, 0.001, 0.001, 0.001, 0.001,
       0.001, 0.001, 0.001});
  expect_trace(*s,
               {0.8,
                0.9,
                0.9,
                0.9,
                0.8666666666666667,
                0.8666666666666667,
                0.8666666666666667,
                0.8333333333333334,
                0.8333333333333334,
                0.8333333333333334,
                0.8,
                0.8333333333333334,
                0.8333333333333334,
                0.8333333333333334,
                0.8666666666666667,
                0.8666666666666667,
                0.8666666666666667,
                0.9,
                0.9,
                0.9,
                0.9,
                0.9,
                0.9,
                0.9,
                0.9},
               0, /*beta1=*/true);

  // Uneven halves (4 up, 6 down) with 2 and 3 stairs.
  CreateArgs uneven = defaults("OneCycle");
  uneven.integer("cycle_second_step_size", 6)
      .integer("cycle_first_stair_count", 2)
      .integer("cycle_second_stair_count", 3);
  expect_trace(*cycle(uneven, 0.0, 1.0, 4),
               {0.0, 0.0, 0.5, 0.5, 1.0, 0.6666666666666666, 0.6666666666666666, 0.3333333333333333,
                0.3333333333333333, 0.0, 0.0, 0.0, 0.0});

  // Stairs only in the second half, then the continuous decay phase.
  CreateArgs decay = defaults("OneCycle");
  decay.integer("cycle_second_step_size", 7)
      .integer("cycle_second_stair_count", 2)
      .number("decay_lr_rate", 0.5)
      .integer("decay_step_size", 2);
  expect_trace(*cycle(decay, 0.001, 0.01, 3),
               {0.001, 0.0040000000000000036, 0.006999999999999999, 0.010000000000000002,
                0.0055000000000000005, 0.0055000000000000005, 0.0055000000000000005, 0.001, 0.001,
                0.001, 0.001, 0.0008, 0.0006666666666666666, 0.0005714285714285715, 0.0005});
}

// DeepSpeed 0.19 accepts an empty second half (cycle_second_step_size 0): the
// lr only climbs, then drops back to the minimum.
TEST_F(OneCycleTest, EmptySecondHalfMatchesDeepSpeed) {
  CreateArgs args = defaults("OneCycle");
  args.integer("cycle_second_step_size", 0);
  auto s = cycle(args, 0.001, 0.01, 5);
  expect_trace(*s, {0.001, 0.0027999999999999995, 0.0046, 0.006400000000000001,
                    0.008200000000000002, 0.001, 0.001, 0.001, 0.001});
  expect_trace(
      *s,
      {0.8, 0.88, 0.8600000000000001, 0.8400000000000001, 0.8200000000000001, 0.9, 0.9, 0.9, 0.9},
      0, /*beta1=*/true);
}

TEST_F(OneCycleTest, WithoutMomentumCyclingOnlyTheLrIsSet) {
  CreateArgs args = defaults("OneCycle");
  args.boolean("cycle_momentum", false);
  auto s = cycle(args, 0.001, 0.01, 4);
  for (int64_t t = -1; t < 12; ++t) EXPECT_EQ(s->point(t).set_mask, DSCORE_HPARAM_LR) << t;
}

TEST_F(OneCycleTest, PerGroupListsWithStairsMatchDeepSpeed) {
  // DeepSpeed implements the per-group lists since #8201 (master after v0.19.5; in 0.19.8).
  CreateArgs args = defaults("OneCycle");
  args.numbers("cycle_min_lr", {0.0, 0.1})
      .numbers("cycle_max_lr", {1.0, 0.2})
      .numbers("cycle_min_mom", {0.5, 0.6})
      .integer("cycle_first_step_size", 2)
      .integer("cycle_first_stair_count", 1);
  auto s = make("OneCycle", args, {1.0, 1.0});
  expect_trace(*s, {0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1}, 1);
  expect_trace(*s, {0.6, 0.9, 0.6, 0.9, 0.9, 0.9, 0.9}, 1, /*beta1=*/true);
}

TEST_F(OneCycleTest, PerGroupBounds) {
  CreateArgs args = defaults("OneCycle");
  args.numbers("cycle_min_lr", {0.0, 0.1})
      .numbers("cycle_max_lr", {1.0, 0.2})
      .numbers("cycle_min_mom", {0.5, 0.6})
      .integer("cycle_first_step_size", 2);
  auto s = make("OneCycle", args, {1.0, 1.0});
  EXPECT_EQ(s->lr(1, 0), 1.0);
  EXPECT_NEAR(s->lr(1, 1), 0.2, 1e-16);
  EXPECT_EQ(s->point(-1, 1).beta1, 0.6);
  EXPECT_NEAR(s->point(1, 0).beta1, 0.5, 1e-16);
}

// DeepSpeed's TestOneCycle.test_lr: lrs recorded BEFORE each step, so
// lrs[i] is the point at t = i - 1 (lrs[0] is the constructor's value).
TEST_F(OneCycleTest, DeepSpeedTestOneCycleLrProperties) {
  for (auto [min_lr, max_lr, decay_rate, cycle_size, decay_step] :
       {std::tuple{1e-5, 1e-2, 1e-3, 10, 10},
        {1e-3, 1e-1, 0.0, 21, 21},
        {1e-3, 1e-1, 1e-1, 21, 21},
        {1e-5, 1e-1, 0.0, 10, 0}}) {
    SCOPED_TRACE(std::to_string(min_lr) + " " + std::to_string(cycle_size));
    CreateArgs args = defaults("OneCycle");
    args.number("decay_lr_rate", decay_rate).integer("decay_step_size", decay_step);
    auto s = cycle(args, min_lr, max_lr, cycle_size);
    std::vector<double> lrs;
    for (int64_t i = 0; i < 3 * cycle_size; ++i) lrs.push_back(s->lr(i - 1));
    EXPECT_EQ(lrs[0], min_lr);
    EXPECT_EQ(lrs[cycle_size], max_lr);  // exactly, as DeepSpeed asserts
    for (int64_t i = 1; i < cycle_size; ++i) EXPECT_GT(lrs[i], lrs[i - 1]) << i;
    for (int64_t i = cycle_size + 1; i < 2 * cycle_size; ++i) EXPECT_LT(lrs[i], lrs[i - 1]) << i;
    if (decay_rate > 0) {
      for (int64_t i = 2 * cycle_size + 1; i < 3 * cycle_size; ++i)
        EXPECT_LT(lrs[i], lrs[i - 1]) << i;
    }
  }
}

// DeepSpeed's TestOneCycle.test_mom: beta1 before each step. DeepSpeed's
// get_mom() reports cycle_max_mom at index 0, but what its constructor
// applies to the first update is cycle_min_mom; point_at(-1) returns what
// is applied, so index 0 is checked against that and the monotone runs
// start at index 1.
TEST_F(OneCycleTest, DeepSpeedTestOneCycleMomentumProperties) {
  for (auto [min_mom, max_mom, decay_rate, step_size] :
       {std::tuple{0.08, 0.09, 1e-3, 10}, {0.08, 0.09, 0.0, 21}}) {
    SCOPED_TRACE(step_size);
    CreateArgs args = defaults("OneCycle");
    args.number("cycle_min_mom", min_mom)
        .number("cycle_max_mom", max_mom)
        .number("decay_mom_rate", decay_rate)
        .integer("decay_step_size", step_size);
    auto s = cycle(args, 1e-3, 1e-2, step_size);
    std::vector<double> moms;
    for (int64_t i = 0; i < 3 * step_size; ++i) moms.push_back(s->point(i - 1).beta1);
    EXPECT_EQ(moms[0], min_mom);  // the constructor's beta1
    EXPECT_EQ(s->point(-1).beta2, 0.99);
    EXPECT_EQ(moms[step_size], min_mom);  // the lr's peak
    for (int64_t i = 2; i < step_size; ++i) EXPECT_LT(moms[i], moms[i - 1]) << i;
    EXPECT_LT(moms[1], max_mom);
    for (int64_t i = step_size + 1; i < 2 * step_size; ++i) EXPECT_GT(moms[i], moms[i - 1]) << i;
    if (decay_rate > 0) {
      for (int64_t i = 2 * step_size + 1; i < 3 * step_size; ++i)
        EXPECT_GT(moms[i], moms[i - 1]) << i;
    }
  }
}

TEST_F(OneCycleTest, DefaultsAndErrors) {
  EXPECT_TRUE(field("OneCycle", "cycle_min_lr").required);
  EXPECT_TRUE(field("OneCycle", "cycle_max_lr").required);
  EXPECT_EQ(field("OneCycle", "cycle_first_step_size").default_json, "2000");
  EXPECT_EQ(field("OneCycle", "cycle_second_step_size").default_json, "");
  EXPECT_EQ(field("OneCycle", "cycle_first_stair_count").default_json, "0");
  EXPECT_EQ(field("OneCycle", "decay_step_size").default_json, "0");
  EXPECT_EQ(field("OneCycle", "cycle_momentum").default_json, "true");
  EXPECT_EQ(field("OneCycle", "cycle_min_mom").default_json, "0.8");
  EXPECT_EQ(field("OneCycle", "cycle_max_mom").default_json, "0.9");
  EXPECT_EQ(field("OneCycle", "decay_lr_rate").default_json, "0.0");
  EXPECT_EQ(field("OneCycle", "decay_mom_rate").default_json, "0.0");
  CreateArgs args = defaults("OneCycle");
  args.number("cycle_max_lr", 0.1);
  EXPECT_NE(create_error("OneCycle", args).find("cycle_min_lr"), std::string::npos);
  // DeepSpeed 0.19: ValueError for a first half <= 0 or a second half < 0.
  args.number("cycle_min_lr", 0.01).integer("cycle_first_step_size", 0);
  EXPECT_NE(create_error("OneCycle", args)
                .find("cycle_first_step_size = 0 is out of range: it must be an integer >= 1"),
            std::string::npos);
  args.integer("cycle_first_step_size", 5).integer("cycle_second_step_size", -1);
  EXPECT_NE(create_error("OneCycle", args)
                .find("cycle_second_step_size = -1 is out of range: it must be an integer >= 0"),
            std::string::npos);
  args.remove("cycle_second_step_size").integer("cycle_first_stair_count", -1);
  EXPECT_NE(create_error("OneCycle", args).find("cycle_first_stair_count = -1"), std::string::npos);
  args.integer("cycle_first_stair_count", 0);
  args.integer("cycle_first_step_size", 5).numbers("cycle_max_lr", {0.1, 0.2});
  EXPECT_NE(create_error("OneCycle", args, 3).find("cycle_max_lr has 2 values"), std::string::npos);
}

}  // namespace
}  // namespace dscore::testing
