// Checkpoints across real ranks (issue 5), through zero_worker under mpirun:
//   - exact resume: K steps, save, exit, resume, K more == 2K uninterrupted,
//     bitwise (losses, skipped steps, loss scale, final parameters), for
//     stages 0-3 at 2 ranks with fp16 dynamic loss scaling and a scheduler;
//   - re-partitioning: a save at (N ranks, stage S) loads at (M, S') for
//     N, M in {1, 2, 4} and every stage: the fp32 masters and optimizer
//     state equal what was saved, bitwise, and training goes on with the
//     same losses at every S' (the stage-equivalence invariant);
//   - crash safety: a rank SIGKILLed at points through a save leaves the
//     previous checkpoint and `latest` loadable and unchanged.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

std::string latest_of(const fs::path& dir) { return read_text_file(dir / "latest"); }

RunSpec resume_spec(int stage) {
  RunSpec spec;
  spec.world = 2;
  spec.stage = stage;
  spec.precision = "fp16";
  spec.initial_scale_power = 24;  // early overflows, then growth every 2 clean steps
  spec.loss_scale_window = 2;
  spec.steps = 12;
  return spec;
}

class ExactResume : public ::testing::TestWithParam<int> {};

TEST_P(ExactResume, StoppedAndResumedEqualsUninterruptedBitwise) {
  const RunSpec spec = resume_spec(GetParam());
  TempDir dir("dscore_resume");
  const std::string ck = (dir.path() / "ck").string();
  const RunResult full = run_workers(spec);
  ASSERT_TRUE(full.ok()) << full.process.describe();
  const RunResult first =
      run_workers(spec, {"--save", ck, "--save-step", "6", "--stop-after-save"});
  ASSERT_TRUE(first.ok()) << first.process.describe();
  EXPECT_EQ(latest_of(ck), "global_step6");
  const RunResult second = run_workers(spec, {"--load", ck});
  ASSERT_TRUE(second.ok()) << second.process.describe();

  const RankReport& a = first.ranks.at(0);
  const RankReport& b = second.ranks.at(0);
  const RankReport& f = full.ranks.at(0);
  ASSERT_EQ(a.losses.size() + b.losses.size(), f.losses.size());
  std::vector<double> losses = a.losses;
  losses.insert(losses.end(), b.losses.begin(), b.losses.end());
  std::vector<double> scales = a.loss_scales;
  scales.insert(scales.end(), b.loss_scales.begin(), b.loss_scales.end());
  std::vector<bool> applied = a.applied;
  applied.insert(applied.end(), b.applied.begin(), b.applied.end());
  EXPECT_EQ(losses, f.losses);
  EXPECT_EQ(scales, f.loss_scales);
  EXPECT_EQ(applied, f.applied);
  EXPECT_TRUE(std::count(f.applied.begin(), f.applied.end(), false) > 0)
      << "fp16 overflow skips must be in play";
  EXPECT_TRUE(std::count(b.applied.begin(), b.applied.end(), true) > 0);
  ASSERT_FALSE(full.params.empty());
  EXPECT_EQ(second.params, full.params) << "final parameters differ from the uninterrupted run";
}

INSTANTIATE_TEST_SUITE_P(Stages, ExactResume, ::testing::Values(0, 1, 2, 3));

// Every (N, S) save, loaded at every (M, S').
TEST(Repartition, EverySaveLoadsAtEveryWorldSizeAndStage) {
  const std::vector<int> worlds = {1, 2, 4}, stages = {0, 1, 2, 3};
  TempDir dir("dscore_repartition");
  struct Saved {
    int world, stage;
    std::string ck;
    std::map<std::string, std::vector<float>> state;
  };
  std::vector<Saved> saves;
  RunSpec spec;
  spec.precision = "bf16";  // 16-bit parameters: masters and the model copy differ
  // bf16 gradients accumulate in fp32 at stage 0 only (DeepSpeed's default);
  // one dtype at every stage makes the stages bitwise equivalent.
  spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  spec.steps = 6;
  spec.train_batch = 16;
  spec.hidden = 36;  // odd sizes: padding and partitions that split parameters
  for (int n : worlds)
    for (int s : stages) {
      spec.world = n;
      spec.stage = s;
      Saved saved{
          n, s, (dir.path() / ("ck_" + std::to_string(n) + "_" + std::to_string(s))).string(), {}};
      const RunResult r = run_workers(
          spec, {"--save", saved.ck, "--save-step", "4", "--stop-after-save", "--dump-state"});
      ASSERT_TRUE(r.ok()) << "save at " << n << " ranks, stage " << s << ": "
                          << r.process.describe();
      ASSERT_EQ(r.state.count("fp32"), 1u);
      ASSERT_EQ(r.state.count("exp_avg_sq"), 1u);
      saved.state = r.state;
      saves.push_back(std::move(saved));
    }
  std::string all;
  for (const Saved& s : saves) all += (all.empty() ? "" : ",") + s.ck;
  for (int m : worlds) {
    // Per save: the losses after loading it at stage 0 (the others must match).
    std::vector<std::vector<double>> reference(saves.size());
    for (int s2 : stages) {
      spec.world = m;
      spec.stage = s2;
      const RunResult r = run_workers(spec, {"--load", all, "--dump-state"});
      ASSERT_TRUE(r.ok()) << "loading at " << m << " ranks, stage " << s2 << ": "
                          << r.process.describe();
      ASSERT_EQ(r.more.size() + 1, saves.size());
      for (size_t i = 0; i < saves.size(); ++i) {
        const RunResult& loaded = i == 0 ? r : r.more[i - 1];
        const std::string what = "save (" + std::to_string(saves[i].world) + " ranks, stage " +
                                 std::to_string(saves[i].stage) + ") loaded at (" +
                                 std::to_string(m) + " ranks, stage " + std::to_string(s2) + ")";
        for (const auto& [name, values] : saves[i].state) {
          ASSERT_EQ(loaded.state.count(name), 1u) << what << ": no " << name;
          EXPECT_TRUE(loaded.state.at(name) == values)
              << what << ": " << name << " differs from the saved one";
        }
        ASSERT_EQ(loaded.ranks.at(0).losses.size(), 2u) << what;
        if (s2 == 0)
          reference[i] = loaded.ranks.at(0).losses;
        else
          EXPECT_EQ(loaded.ranks.at(0).losses, reference[i])
              << what << ": losses differ from stage 0's";
      }
    }
  }
}

// A save killed at `point` on `rank`: the job ends, and the previous
// checkpoint, still named by `latest`, loads with the state it was saved with.
void expect_save_crash_is_harmless(const std::string& point, int rank) {
  SCOPED_TRACE(point + "@" + std::to_string(rank));
  TempDir dir("dscore_crash");
  const std::string ck = (dir.path() / "ck").string();
  RunSpec spec;
  spec.stage = 2;
  spec.steps = 8;
  spec.timeout_ms = 4000;
  const RunResult first =
      run_workers(spec, {"--save", ck, "--save-step", "3", "--stop-after-save", "--dump-state"});
  ASSERT_TRUE(first.ok()) << first.process.describe();
  ASSERT_EQ(latest_of(ck), "global_step3");
  RunSpec crashing = spec;
  crashing.env = {"DSCORE_FAILPOINTS=" + point + "@" + std::to_string(rank)};
  const RunResult crashed = run_workers(crashing, {"--load", ck, "--save", ck, "--save-step", "5"},
                                        std::chrono::seconds(90));
  EXPECT_FALSE(crashed.ok()) << "the failpoint did not fire";
  EXPECT_FALSE(crashed.process.timed_out) << "the job hung after a rank died in a save";
  EXPECT_EQ(latest_of(ck), "global_step3") << "latest must still name the previous checkpoint";
  const RunResult reloaded = run_workers(spec, {"--load", ck, "--dump-state"});
  ASSERT_TRUE(reloaded.ok()) << reloaded.process.describe();
  for (const auto& [name, values] : first.state)
    EXPECT_TRUE(reloaded.state.at(name) == values) << name;
}

TEST(CrashSafety, KilledWhileWritingItsShard) {
  expect_save_crash_is_harmless("checkpoint.mid_write", 1);
}
TEST(CrashSafety, KilledBetweenItsFiles) {
  expect_save_crash_is_harmless("checkpoint.between_files", 0);
}
// (Once every rank's files are durable, only rank 0 has work left: a
// rank > 0 dying then cannot stop a complete checkpoint from being published.)
TEST(CrashSafety, KilledBeforeThePublish) {
  expect_save_crash_is_harmless("checkpoint.before_publish", 0);
}
TEST(CrashSafety, KilledBeforeLatestIsWritten) {
  expect_save_crash_is_harmless("checkpoint.before_latest", 0);
}

// A real SIGKILL from outside while rank 1 writes a large shard.
TEST(CrashSafety, ExternalKillDuringALargeSave) {
  TempDir dir("dscore_crash_ext");
  const std::string ck = (dir.path() / "ck").string();
  RunSpec spec;
  spec.stage = 1;
  spec.steps = 8;
  spec.hidden = 768;  // ~1.8M parameters: the shard takes a while to write
  spec.layers = 3;
  spec.timeout_ms = 4000;
  const RunResult first =
      run_workers(spec, {"--save", ck, "--save-step", "2", "--stop-after-save", "--dump-state"});
  ASSERT_TRUE(first.ok()) << first.process.describe();
  // Saves every step from step 3 on, until killed: the killer watches for a
  // temporary file of a later save and kills whichever rank writes it.
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!killed && std::chrono::steady_clock::now() < deadline) {
      std::error_code ec;
      for (const auto& e : fs::recursive_directory_iterator(ck, ec)) {
        const std::string name = e.path().filename().string();
        const size_t at = name.find(".tmp.");
        if (at == std::string::npos) continue;
        const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + at + 5));
        if (pid > 0 && ::kill(pid, SIGKILL) == 0) killed = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const RunResult crashed =
      run_workers(spec, {"--load", ck, "--save", ck, "--save-step", "3"}, std::chrono::seconds(90));
  killer.join();
  ASSERT_TRUE(killed) << "no save was caught mid-write";
  EXPECT_FALSE(crashed.ok());
  EXPECT_FALSE(crashed.process.timed_out);
  EXPECT_EQ(latest_of(ck), "global_step2");
  const RunResult reloaded = run_workers(spec, {"--load", ck, "--dump-state"});
  ASSERT_TRUE(reloaded.ok()) << reloaded.process.describe();
  for (const auto& [name, values] : first.state)
    EXPECT_TRUE(reloaded.state.at(name) == values) << name;
}

}  // namespace
}  // namespace dscore::testing
