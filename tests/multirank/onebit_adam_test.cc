// OneBitAdam through the engine on real processes (issue 7): during the
// warm-up the host averages gradients and the update is Adam without bias
// correction; from freeze_step on the optimizer takes the gradients local
// (wants_reduced_gradients) and communicates 1-bit compressed momentum
// itself through the host's communicator; training still converges, and
// every rank ends with the same parameters (the worker's report compares the
// global loss, identical on all ranks). ZeRO stages above 0 are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

class OneBit : public ::testing::TestWithParam<int> {};

TEST_P(OneBit, WarmupIsAdamWithoutBiasCorrectionThenCompressedTrainingConverges) {
  RunSpec spec;
  spec.world = GetParam();
  spec.train_batch = 32;  // the frozen variance needs a warm-up on not-too-noisy gradients
  spec.steps = 60;
  spec.scheduler = "";
  spec.optimizer = R"({"type": "OneBitAdam", "params": {"lr": 0.003, "freeze_step": 15}})";
  RunResult onebit = run_workers(spec);
  ASSERT_TRUE(onebit.ok()) << onebit.process.describe();
  spec.optimizer = R"({"type": "Adam", "params": {"lr": 0.003, "bias_correction": false}})";
  RunResult adam = run_workers(spec);
  ASSERT_TRUE(adam.ok()) << adam.process.describe();
  const auto& a = onebit.ranks[0].losses;
  const auto& b = adam.ranks[0].losses;
  ASSERT_EQ(a.size(), 60u);
  // Warm-up: updates 1..14 are Adam without bias correction (the losses of
  // steps 0..14 see those updates). Tolerance: 2e-5 relative. The same math,
  // except that each plugin rounds 1 - beta as its DeepSpeed counterpart
  // does: OnebitAdam in double then fp32 (1 - 0.999 -> 0.001f), FusedAdam in
  // fp32 (1 - 0.999f), 1.3e-5 apart; the losses drift ~4e-6 by step 14.
  for (size_t i = 0; i <= 14; ++i) EXPECT_NEAR(a[i], b[i], 2e-5 * std::abs(b[i])) << "step " << i;
  // Compressed phase: still learns.
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) first += a[i] / 5;
  for (size_t i = 55; i < 60; ++i) last += a[i] / 5;
  EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;
  // The compressed phase sends ~1/32 of what the warm-up's fp32 allreduce
  // sends (signs instead of fp32 values), by the backend's wire counters.
  const auto& sent = onebit.ranks[0].wire_sent;
  ASSERT_EQ(sent.size(), 60u);
  const double warmup_step = static_cast<double>(sent[10] - sent[9]);
  const double compressed_step = static_cast<double>(sent[40] - sent[39]);
  EXPECT_NEAR(compressed_step / warmup_step, 1.0 / 32, 0.25 / 32)
      << "warm-up " << warmup_step << " bytes, compressed " << compressed_step << " bytes per step";
  // Every rank holds the same model: the gathered parameters are finite.
  ASSERT_FALSE(onebit.params.empty());
  for (float p : onebit.params) ASSERT_TRUE(std::isfinite(p));
}

INSTANTIATE_TEST_SUITE_P(Ranks, OneBit, ::testing::Values(2, 4),
                         [](const auto& info) { return "W" + std::to_string(info.param); });

TEST(OneBitAdam, ZeroStagesAreRefusedAtTheCompressedPhase) {
  RunSpec spec;
  spec.stage = 2;
  spec.steps = 8;
  spec.scheduler = "";
  spec.optimizer = R"({"type": "OneBitAdam", "params": {"lr": 0.003, "freeze_step": 3}})";
  RunResult r = run_workers(spec);
  EXPECT_FALSE(r.ok());
  EXPECT_NE((r.process.out + r.process.err).find("\"stage\": 0"), std::string::npos)
      << r.process.describe();
}

}  // namespace
}  // namespace dscore::testing
