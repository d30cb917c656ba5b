// Faults in a multi-rank job (issue 3): a killed rank ends the job on every
// rank within the collective timeout, with messages naming the rank and the
// collective; a hung rank is named by the rank that timed out waiting for
// it; an fp16 overflow on one rank only makes every rank skip the step.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Faults, KilledRankEndsTheJobAndIsNamed) {
  RunSpec spec;
  spec.steps = 40;
  spec.timeout_ms = 5000;
  const auto start = Clock::now();
  RunResult r = run_workers(spec, {"--die-rank", "1", "--die-step", "3"}, std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(r.ok()) << r.process.describe();
  EXPECT_FALSE(r.process.timed_out) << "the job hung instead of ending";
  EXPECT_LT(seconds, 5.0 + 15.0) << "must end within the collective timeout (+ launch slack)";
  const std::string all = r.process.out + r.process.err;
  // mpirun names the dead rank; the survivor says which collective it was in
  // (or, if its deadline came first, which rank is gone).
  EXPECT_NE(all.find("rank 1"), std::string::npos) << all;
  EXPECT_TRUE(all.find("allgather") != std::string::npos ||
              all.find("reduce") != std::string::npos || all.find("allreduce") != std::string::npos)
      << all;
}

TEST(Faults, HungRankIsNamedByTheRankThatTimedOut) {
  RunSpec spec;
  spec.steps = 40;
  spec.timeout_ms = 3000;
  const auto start = Clock::now();
  RunResult r =
      run_workers(spec, {"--hang-rank", "1", "--hang-step", "2"}, std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.process.timed_out) << "the job hung instead of ending";
  EXPECT_LT(seconds, 3.0 + 15.0);
  const std::string all = r.process.out + r.process.err;
  EXPECT_NE(all.find("did not complete within 3.0 s on rank 0"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 1 (pid"), std::string::npos) << all;
  EXPECT_NE(all.find("has not reached it"), std::string::npos) << all;
}

TEST(Faults, Fp16OverflowOnOneRankSkipsTheStepOnEveryRank) {
  RunSpec spec;
  spec.precision = "fp16";
  spec.steps = 6;
  for (int stage : {0, 2, 3}) {
    spec.stage = stage;
    RunResult r = run_workers(spec, {"--poison-rank", "1", "--poison-step", "3"});
    ASSERT_TRUE(r.ok()) << r.process.describe();
    ASSERT_EQ(r.ranks.size(), 2u);
    for (const RankReport& rank : r.ranks) {
      ASSERT_EQ(rank.applied.size(), 6u);
      EXPECT_FALSE(rank.applied[3]) << "stage " << stage << ": the poisoned step must be skipped";
      EXPECT_TRUE(rank.applied[4]) << "stage " << stage;
      // The scale halved at the overflow (hysteresis 2 first spends one
      // credit, so with initial_scale_power 12 and the default hysteresis
      // the scale is unchanged on the first overflow).
      EXPECT_EQ(rank.loss_scales[3], r.ranks[0].loss_scales[3]);
    }
    // Every rank saw the same global losses (the poisoned step's is NaN on all).
    ASSERT_EQ(r.ranks[0].losses.size(), r.ranks[1].losses.size());
    for (size_t i = 0; i < r.ranks[0].losses.size(); ++i) {
      const double a = r.ranks[0].losses[i], b = r.ranks[1].losses[i];
      EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "step " << i;
    }
    EXPECT_TRUE(std::isnan(r.ranks[0].losses[3]));
  }
}

}  // namespace
}  // namespace dscore::testing
