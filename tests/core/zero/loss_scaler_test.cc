// DeepSpeed 0.19's ZeRO DynamicLossScaler rules
// (docs/deepspeed-reference.md#loss-scaler-defaults, #loss-scaler-update-rules)
// and the traces of runtime/half_precision/test_dynamic_loss_scale.py
// (docs/deepspeed-reference.md#deepspeed-unit-tests), applied to dscore's one
// scaler.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/zero/loss_scaler.h"

namespace dscore::zero {
namespace {

// The fp16 section as the schema resolves it when only "enabled" is written.
config::Fp16Config fp16_defaults() {
  config::Fp16Config fp16;
  fp16.enabled = true;
  fp16.initial_scale_power = 16;
  fp16.loss_scale_window = 1000;
  fp16.hysteresis = 2;
  fp16.min_loss_scale = 1;
  return fp16;
}

// One update per character ('O' overflow, 'C' clean); the scale and the
// remaining hysteresis after each.
struct Trace {
  std::vector<double> scales;
  std::vector<int64_t> hysteresis;
  bool failed = false;
};
Trace run(LossScaler s, const std::string& pattern) {
  Trace t;
  for (char c : pattern) {
    if (!s.update(c == 'O').ok()) {
      t.failed = true;
      break;
    }
    t.scales.push_back(s.scale());
    t.hysteresis.push_back(s.hysteresis_left());
  }
  return t;
}

TEST(LossScaler, NoDynamicKeysUsesTheSectionDefaults) {
  // DeepSpeed 0.19: the fp16 section's defaults reach the ZeRO scaler too
  // (0.16 started it at 2^32 with hysteresis 1 when no dynamic key was written).
  config::Fp16Config fp16 = fp16_defaults();
  LossScaler s = LossScaler::from_config(fp16);
  EXPECT_TRUE(s.is_dynamic());
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_EQ(s.hysteresis_left(), 2);
  ASSERT_TRUE(s.update(true).ok());  // hysteresis 2 -> 1, scale unchanged
  EXPECT_EQ(s.scale(), 65536);
  ASSERT_TRUE(s.update(true).ok());  // now halves
  EXPECT_EQ(s.scale(), 32768);
}

TEST(LossScaler, DynamicKeysUseInitialScalePowerAndHysteresis) {
  config::Fp16Config fp16 = fp16_defaults();
  fp16.initial_scale_power = 8;
  fp16.hysteresis = 3;
  LossScaler s = LossScaler::from_config(fp16);
  EXPECT_EQ(s.scale(), 256);
  ASSERT_TRUE(s.update(true).ok());  // 3 -> 2
  ASSERT_TRUE(s.update(true).ok());  // 2 -> 1
  EXPECT_EQ(s.scale(), 256);
  ASSERT_TRUE(s.update(true).ok());  // now halves
  EXPECT_EQ(s.scale(), 128);
}

// Expected traces below were produced by DeepSpeed 0.19.8's own
// DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py) driven by
// /work/ds-venv/bin/python with the same arguments and overflow pattern
// (update_scale(overflow) per character), reading cur_scale and
// cur_hysteresis after each call.

TEST(LossScaler, FirstDoublingAfterWindowPlusOneCleanIterationsThenEveryWindow) {
  // 256, window 2, hysteresis 1, no overflow: doubles at iterations 2, 4, 6.
  Trace t = run(LossScaler::dynamic(256, 2, 1, 1, false), "CCCCCCCC");
  EXPECT_EQ(t.scales, (std::vector<double>{256, 256, 512, 512, 1024, 1024, 2048, 2048}));
}

TEST(LossScaler, HysteresisIsRefilledOnlyWhenTheScaleDoubles) {
  // 1024, window 3, hysteresis 2, not consecutive.
  Trace t = run(LossScaler::dynamic(1024, 3, 1, 2, false), "OOCCCCOCCCCCOO");
  EXPECT_EQ(t.scales, (std::vector<double>{1024, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024,
                                           2048, 2048, 2048, 1024}));
  EXPECT_EQ(t.hysteresis, (std::vector<int64_t>{1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 2, 1, 1}));
  EXPECT_FALSE(t.failed);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanIteration) {
  Trace t = run(LossScaler::dynamic(1024, 3, 1, 2, true), "OCOCOOCCCCO");
  EXPECT_EQ(t.scales,
            (std::vector<double>{1024, 1024, 1024, 1024, 1024, 512, 512, 512, 512, 1024, 1024}));
  EXPECT_EQ(t.hysteresis, (std::vector<int64_t>{1, 2, 1, 2, 1, 1, 2, 2, 2, 2, 1}));
}

TEST(LossScaler, OverflowAtTheMinimumAfterHysteresisFails) {
  // 4, window 2, min 1, hysteresis 2: DeepSpeed raises at the 9th update.
  Trace t = run(LossScaler::dynamic(4, 2, 1, 2, false), "OOOCCCOOO");
  EXPECT_EQ(t.scales, (std::vector<double>{4, 2, 1, 1, 1, 2, 2, 1}));
  EXPECT_EQ(t.hysteresis, (std::vector<int64_t>{1, 1, 1, 1, 1, 2, 1, 1}));
  EXPECT_TRUE(t.failed);
}

TEST(LossScaler, AllOverflowHalvesEveryStepDownToTheMinimumThenFails) {
  LossScaler s = LossScaler::dynamic(16, 1000, 1, 1, false);
  for (double expected : {8.0, 4.0, 2.0, 1.0}) {
    ASSERT_TRUE(s.update(true).ok());
    EXPECT_EQ(s.scale(), expected);
  }
  Status at_min = s.update(true);
  EXPECT_EQ(at_min.code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_NE(at_min.message().find("minimum"), std::string::npos);
}

TEST(LossScaler, SomeOverflowTraceOfDeepSpeedsTest) {
  // 2^8, window 2 (test_dynamic_loss_scale "some overflow"): 2 overflows -> 64,
  // 3 clean -> 128, 1 overflow -> 64.
  LossScaler s = LossScaler::dynamic(256, 2, 1, 1, false);
  ASSERT_TRUE(s.update(true).ok());
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 64);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.scale(), 128);
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 64);
}

TEST(LossScaler, IsolatedCleanStepsDoNotRefillHysteresisUnlessConsecutive) {
  LossScaler plain = LossScaler::dynamic(1024, 1000, 1, 2, false);
  ASSERT_TRUE(plain.update(true).ok());   // hysteresis 2 -> 1
  ASSERT_TRUE(plain.update(false).ok());  // not refilled
  ASSERT_TRUE(plain.update(true).ok());   // halves
  EXPECT_EQ(plain.scale(), 512);

  LossScaler consecutive = LossScaler::dynamic(1024, 1000, 1, 2, true);
  ASSERT_TRUE(consecutive.update(true).ok());
  ASSERT_TRUE(consecutive.update(false).ok());  // refilled to 2
  ASSERT_TRUE(consecutive.update(true).ok());   // 2 -> 1, no halving
  EXPECT_EQ(consecutive.scale(), 1024);
}

TEST(LossScaler, StaticScaleNeverChanges) {
  config::Fp16Config fp16;
  fp16.enabled = true;
  fp16.loss_scale = 138;  // TestZeroStaticScale
  LossScaler s = LossScaler::from_config(fp16);
  EXPECT_FALSE(s.is_dynamic());
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 138);
}

}  // namespace
}  // namespace dscore::zero
