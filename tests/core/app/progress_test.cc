// ProgressReporter's summary line (core/app/progress.cc): a run's rate
// counts only the samples it trained itself, and a resumed run that trains
// nothing (its checkpoint already at train_steps) says so without a rate,
// time or loss.
#include "core/app/progress.h"

#include <gtest/gtest.h>

#include <string>

namespace dscore {
namespace {

// What finish() prints for a plain (not terminal, not JSON) run.
std::string summary(ProgressReporter& reporter, const ProgressSnapshot& s) {
  ::testing::internal::CaptureStdout();
  reporter.finish(s);
  return ::testing::internal::GetCapturedStdout();
}

TEST(ProgressReporter, ResumedRunThatTrainsNothingSaysSoWithoutARate) {
  // A token model (1024 tokens per sample) resumed from a checkpoint at
  // step 50 of 50 (6400 samples): no step runs before finish().
  ProgressObserver observer(/*total_steps=*/50, /*steps_per_print=*/10, /*terminal=*/false,
                            /*json=*/false, /*tokens_per_sample=*/1024, /*start_samples=*/6400,
                            /*start_step=*/50, "");
  ::testing::internal::CaptureStdout();
  observer.finish();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, "done: nothing trained, already at step 50 of 50\n");
}

TEST(ProgressReporter, SummaryRateCountsOnlyThisRunsSamples) {
  ProgressReporter reporter(/*total_steps=*/8, /*steps_per_print=*/0, /*terminal=*/false,
                            /*json=*/false, /*tokens_per_sample=*/4, /*start_samples=*/128,
                            /*start_step=*/4);
  ProgressSnapshot s;
  s.step = 8;
  s.total_steps = 8;
  s.samples = 256;
  s.loss = 0.5;
  const std::string out = summary(reporter, s);
  EXPECT_EQ(out.rfind("done: 8 steps, 256 samples in ", 0), 0u) << out;
  EXPECT_NE(out.find(", final loss 0.500000, "), std::string::npos) << out;
  EXPECT_NE(out.find(" tokens/s\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('-'), std::string::npos) << "a negative rate: " << out;
}

}  // namespace
}  // namespace dscore
