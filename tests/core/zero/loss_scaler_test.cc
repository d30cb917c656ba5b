// DeepSpeed's ZeRO DynamicLossScaler rules
// (docs/deepspeed-reference.md#loss-scaler-defaults, #loss-scaler-update-rules)
// and the traces of runtime/half_precision/test_dynamic_loss_scale.py
// (docs/deepspeed-reference.md#deepspeed-unit-tests), applied to dscore's one
// scaler.
#include <gtest/gtest.h>

#include <cmath>

#include "core/zero/loss_scaler.h"

namespace dscore::zero {
namespace {

TEST(LossScaler, NoDynamicKeysGivesZeroDefaultsTwoToThe32) {
  config::Fp16Config fp16;
  fp16.enabled = true;
  LossScaler s = LossScaler::from_config(fp16);
  EXPECT_TRUE(s.is_dynamic());
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 32));
  // Hysteresis 1: the first overflow halves at once.
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 31));
}

TEST(LossScaler, DynamicKeysUseInitialScalePowerAndHysteresis) {
  config::Fp16Config fp16;
  fp16.enabled = true;
  fp16.dynamic_args_given = true;
  fp16.initial_scale_power = 8;
  fp16.hysteresis = 2;
  LossScaler s = LossScaler::from_config(fp16);
  EXPECT_EQ(s.scale(), 256);
  ASSERT_TRUE(s.update(true).ok());  // hysteresis 2 -> 1, scale unchanged
  EXPECT_EQ(s.scale(), 256);
  ASSERT_TRUE(s.update(true).ok());  // now halves
  EXPECT_EQ(s.scale(), 128);
}

TEST(LossScaler, DoublesAfterWindowCleanIterationsFromAFreshStart) {
  // window 2: (cur_iter - (-1)) % 2 == 0 at cur_iter 1, 3, 5, ...
  LossScaler s = LossScaler::dynamic(256, 2, 1, 1, false);
  std::vector<double> scales;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(s.update(false).ok());
    scales.push_back(s.scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{256, 512, 512, 1024, 1024, 2048}));
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
