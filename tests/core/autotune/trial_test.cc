// Trials of `dscore autotune` as child processes (core/autotune/trial.h):
// how one ended, its output in its folder, a timeout that ends the whole
// process group, and the profiled window read from progress records.
#include "core/autotune/trial.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <string>
#include <thread>

#include "tests/fakes/temp_dir.h"

namespace dscore::autotune {
namespace {

using dscore::testing::TempDir;

// Whether pid has ended: no such process, or a zombie (killed, waiting
// for init to reap it; a loaded machine's init can take seconds).
bool ended(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');  // the state follows the command's name
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TrialProcess shell(const TempDir& dir, const std::string& script) {
  TrialProcess p;
  p.argv = {"/bin/sh", "-c", script};
  p.folder = dir.path().string();
  return p;
}

TEST(AutotuneTrial, KeepsOutputAndTheEnvironmentItWasGiven) {
  TempDir dir("dscore_trial");
  TrialProcess p = shell(dir, "echo out $DSCORE_AUTOTUNE_TRIAL; echo err >&2; exit 3");
  p.env = {{"DSCORE_AUTOTUNE_TRIAL", "z1_mb4_gas2"}};
  auto exit = run_trial_process(p);
  ASSERT_TRUE(exit.ok()) << exit.status().message();
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_FALSE(exit->ok());
  EXPECT_EQ(read(dir.file("stdout.log")), "out z1_mb4_gas2\n");
  EXPECT_EQ(read(dir.file("stderr.log")), "err\n");
  EXPECT_GT(exit->peak_rss_bytes, 0);
  EXPECT_EQ(getenv("DSCORE_AUTOTUNE_TRIAL"), nullptr);  // not set in this process
}

TEST(AutotuneTrial, ACrashIsNamedBySignal) {
  TempDir dir("dscore_trial");
  auto exit = run_trial_process(shell(dir, "echo 'error: boom' >&2; kill -SEGV $$"));
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->signal, SIGSEGV);
  const std::string reason = failure_reason(*exit, read(dir.file("stderr.log")));
  EXPECT_EQ(reason.rfind("killed by signal 11 (", 0), 0u) << reason;
  EXPECT_NE(reason.find("error: boom"), std::string::npos) << reason;
}

TEST(AutotuneTrial, ATimeoutEndsTheWholeProcessGroup) {
  TempDir dir("dscore_trial");
  // A launcher that starts a rank and waits: both must end.
  TrialProcess p = shell(dir, "sleep 60 & echo $! > " + dir.file("rank.pid") + "; wait");
  p.timeout = std::chrono::seconds(1);
  const auto start = std::chrono::steady_clock::now();
  auto exit = run_trial_process(p);
  ASSERT_TRUE(exit.ok());
  EXPECT_TRUE(exit->timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  const pid_t rank = std::stoi(read(dir.file("rank.pid")));
  // The rank was killed with its group (allow the signal a moment).
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = ended(rank);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone);
  EXPECT_EQ(failure_reason(*exit, ""), "timed out");
}

TEST(AutotuneTrial, AMissingProgramIsAFailedTrial) {
  TempDir dir("dscore_trial");
  TrialProcess p;
  p.argv = {dir.file("no-such-program")};
  p.folder = dir.path().string();
  auto exit = run_trial_process(p);
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->exit_code, 127);
}

TEST(AutotuneTrial, TheWindowIsTimedBetweenRecords) {
  const std::string out =
      "[dscore] something else\n"
      R"({"type":"log","message":"x"})"
      "\n"
      R"({"time":"t","type":"progress","rank":0,"step":1,"samples":32,"elapsed_seconds":0.5})"
      "\n"
      R"({"time":"t","type":"progress","rank":0,"step":2,"samples":64,"elapsed_seconds":0.7})"
      "\n"
      R"({"time":"t","type":"progress","rank":0,"step":3,"samples":96,"elapsed_seconds":0.9})"
      "\n"
      R"({"time":"t","type":"progress","rank":0,"step":4,"samples":128,"elapsed_seconds":1.2})"
      "\n{broken\n";
  const auto points = read_progress(out);
  ASSERT_EQ(points.size(), 4u);
  // Steps 3..4: from step 2's record to step 4's.
  auto rate = window_rate(points, 3, 4);
  ASSERT_TRUE(rate.ok());
  EXPECT_NEAR(rate->seconds_per_step, 0.25, 1e-12);
  EXPECT_NEAR(rate->samples_per_second, 64 / 0.5, 1e-9);
  // Step 1 is timed from the run's start.
  auto first = window_rate(points, 1, 2);
  ASSERT_TRUE(first.ok());
  EXPECT_NEAR(first->seconds_per_step, 0.35, 1e-12);
  auto missing = window_rate(points, 3, 6);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("step 6"), std::string::npos);
}

}  // namespace
}  // namespace dscore::autotune
