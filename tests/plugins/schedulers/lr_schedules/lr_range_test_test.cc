// LRRangeTest (plugins/schedulers/lr_schedules/lr_range_test.cc) through the C ABI: hand-derived
// continuous and staircase values (docs/deepspeed-reference.md#lrrangetest), per-group minimums,
// and DeepSpeed's TestLrRange properties (docs/deepspeed-reference.md#deepspeed-unit-tests: lr
// recorded before each step, first == min, equal within each stair, strictly increasing when
// continuous).
#include <string>
#include <tuple>
#include <vector>

#include "schedule_fixture.h"

namespace dscore::testing {
namespace {

class LrRangeTestTest : public ScheduleTest {
 protected:
  static std::unique_ptr<Instance> range(double min_lr, double rate, int64_t size, bool staircase,
                                         std::vector<double> base = {0.5}) {
    CreateArgs args = defaults("LRRangeTest");
    args.number("lr_range_test_min_lr", min_lr)
        .number("lr_range_test_step_rate", rate)
        .integer("lr_range_test_step_size", size)
        .boolean("lr_range_test_staircase", staircase);
    return make("LRRangeTest", args, base);
  }
};

TEST_F(LrRangeTestTest, HandDerivedValues) {
  auto c = range(0.01, 0.5, 4, false);  // lr = 0.01 (1 + 0.5 (t + 1) / 4)
  EXPECT_EQ(c->lr(-1), 0.01);           // the constructor's value
  EXPECT_EQ(c->lr(0), 0.01 * 1.125);
  EXPECT_EQ(c->lr(3), 0.01 * 1.5);
  EXPECT_EQ(c->lr(5), 0.01 * 1.75);
  auto s = range(0.01, 0.5, 4, true);  // floor((t + 1) / 4)
  EXPECT_EQ(s->lr(2), 0.01);
  EXPECT_EQ(s->lr(3), 0.01 * 1.5);
  EXPECT_EQ(s->lr(6), 0.01 * 1.5);
  EXPECT_EQ(s->lr(7), 0.01 * 2.0);
  EXPECT_EQ(s->point(7).set_mask, DSCORE_HPARAM_LR);
}

TEST_F(LrRangeTestTest, PerGroupMinimumsIgnoreTheOptimizerLr) {
  CreateArgs args = defaults("LRRangeTest");
  args.numbers("lr_range_test_min_lr", {1e-3, 1e-2}).integer("lr_range_test_step_size", 10);
  auto s = make("LRRangeTest", args, {7.0, 9.0});
  EXPECT_EQ(s->lr(-1, 0), 1e-3);
  EXPECT_EQ(s->lr(-1, 1), 1e-2);
  EXPECT_EQ(s->lr(19, 1), 1e-2 * 3);
  args.numbers("lr_range_test_min_lr", {1e-3});
  EXPECT_NE(create_error("LRRangeTest", args, 2).find("lr_range_test_min_lr has 1 values"),
            std::string::npos);
}

// DeepSpeed's TestLrRange parameter table; lrs[i] is the point at t = i - 1.
TEST_F(LrRangeTestTest, DeepSpeedTestLrRangeProperties) {
  for (auto [min_lr, rate, size, staircase] : {std::tuple{1e-4, 1e-5, 1, true},
                                               {1e-5, 1e-5, 1, false},
                                               {1e-4, 1e-3, 10, true},
                                               {1e-3, 1e-3, 10, false},
                                               {1e-2, 1e-2, 19, true},
                                               {1e-2, 1e-2, 19, false}}) {
    SCOPED_TRACE(std::to_string(size) + (staircase ? " staircase" : " continuous"));
    auto s = range(min_lr, rate, size, staircase);
    std::vector<double> lrs;
    const int64_t steps =
        std::max<int64_t>(25, size * 2);  // DeepSpeed: max(50, 2 size) samples / 2
    for (int64_t i = 0; i < steps; ++i) lrs.push_back(s->lr(i - 1));
    EXPECT_EQ(lrs[0], min_lr);
    if (staircase) {
      for (int64_t i = 0; i < steps; i += size)
        for (int64_t j = i; j < std::min(i + size, steps); ++j) EXPECT_EQ(lrs[j], lrs[i]) << j;
      for (int64_t i = size; i < steps; i += size) EXPECT_GT(lrs[i], lrs[i - 1]) << i;
    } else {
      for (int64_t i = 1; i < steps; ++i) EXPECT_GT(lrs[i], lrs[i - 1]) << i;
    }
  }
}

TEST_F(LrRangeTestTest, DefaultsAndErrors) {
  EXPECT_EQ(field("LRRangeTest", "lr_range_test_min_lr").default_json, "0.001");
  EXPECT_EQ(field("LRRangeTest", "lr_range_test_step_size").default_json, "2000");
  EXPECT_EQ(field("LRRangeTest", "lr_range_test_step_rate").default_json, "1.0");
  EXPECT_EQ(field("LRRangeTest", "lr_range_test_staircase").default_json, "false");
  CreateArgs args = defaults("LRRangeTest");
  auto s = make("LRRangeTest", args);
  EXPECT_EQ(s->lr(-1), 0.001);
  EXPECT_EQ(s->lr(1999), 0.002);
  args.integer("lr_range_test_step_size", 0);
  // DeepSpeed 0.19: "ValueError: lr_range_test_step_size must be a positive integer, got 0".
  EXPECT_NE(create_error("LRRangeTest", args)
                .find("lr_range_test_step_size = 0 is out of range: it must be an integer >= 1"),
            std::string::npos);
}

}  // namespace
}  // namespace dscore::testing
