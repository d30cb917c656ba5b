// Kill and resume (issue 54, item 1): `dscore run` with NVMe offload and a
// checkpoint every 25 steps is killed with SIGKILL again and again, at
// random moments (mid-step, mid-save, mid-swap-write) and at the save's
// crash points (DSCORE_FAILPOINTS), and resumed from its checkpoint folder
// each time, at ZeRO stage 1, 2 or 3 in turn, until it completes. The final
// checkpoint's parameters and optimizer state must equal, byte for byte, an
// uninterrupted run's (the tensors; the metadata names each save by a random id). DSCORE_SOAK_KILLS
// sets the kills (default 20, the CI version); the figures are printed at the end.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/config/json.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

// The save's crash points (checkpoint/ names them).
constexpr const char* kSavePoints[] = {"checkpoint.before_latest", "checkpoint.mid_write",
                                       "checkpoint.between_files", "checkpoint.before_publish"};

struct Killed {
  bool finished = false;        // it exited before the kill (0: completed)
  bool ranks_outlived = false;  // a rank still ran after its launcher was killed
  int exit_code = -1;
  int64_t last_step = 0;  // the last progress record's step
  std::string err;        // its stderr
};

class KillResumeSoak : public ::testing::Test {
 protected:
  std::string config(int stage, const std::string& checkpoint_dir, int64_t train_steps = 1000) {
    return dir_
        .write("stage" + std::to_string(stage) + ".json",
               R"({"train_batch_size": 32, "seed": 1, "train_steps": )" +
                   std::to_string(train_steps) + R"(,
                   "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
                   "zero_optimization": {"stage": )" +
                   std::to_string(stage) +
                   R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                   dir_.file("nvme") + R"("}},
                   "model": {"type": "mlp", "input_dim": 8, "hidden_dim": 16, "output_dim": 2,
                             "n_hidden_layers": 1},
                   "checkpoint_dir": ")" +
                   checkpoint_dir + R"(", "save_interval": 25})")
        .string();
  }

  // `dscore run` on `config` with `ranks` ranks (resuming from
  // `checkpoint_dir` when it has a checkpoint; `steps`, when set, ends it
  // there), killed with SIGKILL after `kill_after` unless it ends first;
  // `failpoints` set DSCORE_FAILPOINTS. Under `-n 2` the kill hits mpirun:
  // its ranks must end with it (they get SIGTERM when it dies).
  Killed run(const std::string& config, const std::string& checkpoint_dir,
             std::chrono::milliseconds kill_after, const std::string& failpoints, int ranks = 1,
             int64_t steps = 0) {
    std::vector<std::string> args = {"run", "--config", config, "--log-format", "json"};
    if (fs::exists(checkpoint_dir + "/latest"))
      args.insert(args.end(), {"--resume", checkpoint_dir});
    if (ranks > 1) args.insert(args.end(), {"-n", std::to_string(ranks)});
    if (steps > 0) args.insert(args.end(), {"--steps", std::to_string(steps)});
    ProcessOptions options;
    options.timeout = kill_after;
    options.descendants_grace = std::chrono::seconds(20);
    if (ranks > 1) options.env = mpi_test_env();
    if (!failpoints.empty()) options.env["DSCORE_FAILPOINTS"] = failpoints;
    const ProcessResult r = run_dscore(args, options);
    Killed k;
    // A crash point kills one rank; mpirun then ends the others and exits
    // non-zero: a kill too.
    const bool crashed_rank = ranks > 1 && !failpoints.empty() && r.exited() && r.exit_code != 0 &&
                              r.err.find("signal 9") != std::string::npos;
    k.finished = !r.timed_out && r.signal == 0 && !crashed_rank;
    k.ranks_outlived = r.descendants_outlived;
    k.exit_code = r.exit_code;
    k.err = r.err;
    for (const std::string& line : split_lines(r.out)) {
      auto v = json::parse(line, "stdout");
      if (v.ok() && v->is_object() && v->find("step") != nullptr && v->find("type") != nullptr &&
          v->find("type")->as_string() == "progress")
        k.last_step = v->find("step")->as_int();
    }
    return k;
  }

  // A safetensors file's tensors: their header entries (names, dtypes,
  // shapes, offsets) and the data. The metadata is left out: it names each
  // save by a random checkpoint id.
  static std::pair<std::string, std::string> tensors_of(const std::string& path) {
    const std::string bytes = read_text_file(path);
    if (bytes.size() < 8) return {};
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    if (n > bytes.size() - 8) return {};
    auto header = json::parse(bytes.substr(8, n), path);
    if (!header.ok()) return {};
    header->erase("__metadata__");
    return {json::serialize(*header), bytes.substr(8 + n)};
  }

  static int64_t latest_step(const std::string& checkpoint_dir) {
    const std::string tag = read_text_file(checkpoint_dir + "/latest");
    return tag.empty() ? 0 : std::stoll(tag.substr(tag.find_first_of("0123456789")));
  }

  // The tensors of every safetensors file of two checkpoints' step folders
  // are the same bytes (a failure names the file where not).
  static void expect_same_checkpoint_tensors(const std::string& got_dir,
                                             const std::string& want_dir, int64_t step) {
    const std::string folder = "/global_step" + std::to_string(step);
    int files = 0;
    for (const auto& entry : fs::directory_iterator(want_dir + folder)) {
      if (entry.path().extension() != ".safetensors") continue;
      const std::string file = entry.path().filename().string();
      const auto got = tensors_of(got_dir + folder + "/" + file);
      const auto want = tensors_of(entry.path().string());
      ASSERT_FALSE(want.second.empty()) << file;
      EXPECT_EQ(got.first, want.first) << file;
      EXPECT_TRUE(got.second == want.second) << file << ": the tensors differ";
      ++files;
    }
    EXPECT_GE(files, 2) << "no model and optimizer files in " << want_dir + folder;
  }

  TempDir dir_{"dscore_soak"};
};

TEST_F(KillResumeSoak, EveryKillResumesAndTheEndIsBitwiseTheUninterruptedRun) {
  const char* env = std::getenv("DSCORE_SOAK_KILLS");
  const int kills = env != nullptr ? std::atoi(env) : 20;
  const std::string whole = dir_.file("whole");
  Killed reference = run(config(2, whole), whole, std::chrono::minutes(5), "");
  ASSERT_TRUE(reference.finished && reference.exit_code == 0) << reference.err;

  const std::string ck = dir_.file("ck");
  // The save's crash points in one kill of three; random moments otherwise.
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> moment_ms(5, 200);
  int killed = 0, at_save_points = 0, runs = 0;
  int64_t steps_redone = 0;
  while (killed < kills) {
    ASSERT_LT(++runs, kills * 10) << "no progress";
    const int stage = 1 + runs % 3;
    const bool at_save = killed % 3 == 2;
    const int64_t before = fs::exists(ck + "/latest") ? latest_step(ck) : 0;
    Killed k = at_save ? run(config(stage, ck), ck, std::chrono::seconds(60),
                             kSavePoints[at_save_points % 4])
                       : run(config(stage, ck), ck, std::chrono::milliseconds(moment_ms(rng)), "");
    if (k.finished) {
      // It completed before the kill, or a crash point it never reached.
      ASSERT_EQ(k.exit_code, 0) << k.err;
      if (latest_step(ck) == 1000) fs::remove_all(ck);  // done too soon: start again
      continue;
    }
    ++killed;
    at_save_points += at_save;
    const int64_t after = fs::exists(ck + "/latest") ? latest_step(ck) : 0;
    EXPECT_GE(after, before) << "a kill lost a published checkpoint";
    steps_redone += std::max<int64_t>(0, k.last_step - after);
  }
  // The last run completes, at the reference's stage.
  Killed last = run(config(2, ck), ck, std::chrono::minutes(5), "");
  ASSERT_TRUE(last.finished && last.exit_code == 0) << last.err;
  ASSERT_EQ(latest_step(ck), 1000);
  expect_same_checkpoint_tensors(ck, whole, 1000);
  EXPECT_TRUE(fs::is_empty(dir_.file("nvme"))) << "swap folders were left";
  std::printf(
      "soak: %d kills (%d at the save's crash points) over %d runs, %lld steps redone, "
      "0 bytes lost\n",
      killed, at_save_points, runs, static_cast<long long>(steps_redone));
}

// One run of the chain of resumes: its ranks and stage, and the checkpoint
// step it started from and the one it left published.
struct Segment {
  int ranks = 1;
  int stage = 1;
  int64_t from = 0;
  int64_t to = 0;
};

// The world size changes too: runs alternate between 1 and 2 ranks (mpirun,
// killed with SIGKILL: its ranks must end with it) and stages 1-3. Sums
// over 2 ranks are not the bits of sums over 1, so the reference is the
// same chain of resumes run again without kills: each run from the same
// checkpoint at the same size and stage, stopped (--steps) at the step the
// killed run left published. Every chain that completes is checked so.
// DSCORE_SOAK_RESIZE_KILLS sets the kills (default 10).
TEST_F(KillResumeSoak, KillsAtAnotherWorldSizeEndAsTheSameResumesWithoutKills) {
  const char* env = std::getenv("DSCORE_SOAK_RESIZE_KILLS");
  const int kills = env != nullptr ? std::atoi(env) : 10;
  constexpr int64_t kSteps = 4000;
  const std::string ck = dir_.file("ck");
  const std::string again = dir_.file("again");
  std::vector<Segment> chain;
  int chains = 0;
  size_t resumes = 0;
  // Replays `chain` (its last run completed) without kills, compares, and
  // starts a new chain.
  auto check_chain = [&] {
    fs::remove_all(again);
    for (const Segment& s : chain) {
      ASSERT_EQ(fs::exists(again + "/latest") ? latest_step(again) : 0, s.from);
      Killed k =
          run(config(s.stage, again, kSteps), again, std::chrono::minutes(5), "", s.ranks, s.to);
      ASSERT_TRUE(k.finished && k.exit_code == 0) << k.err;
    }
    expect_same_checkpoint_tensors(ck, again, kSteps);
    ++chains;
    resumes += chain.size() - 1;
    chain.clear();
    fs::remove_all(ck);
  };

  std::mt19937 rng(2024);
  int killed = 0, runs = 0;
  int64_t steps_redone = 0;
  while (killed < kills) {
    ASSERT_LT(++runs, kills * 10) << "no progress";
    Segment s;
    s.ranks = 1 + runs % 2;
    s.stage = 1 + (runs / 2) % 3;
    s.from = fs::exists(ck + "/latest") ? latest_step(ck) : 0;
    // One rank trains about 4 steps a millisecond; mpirun's ranks start in
    // about 0.3 s and train 1.6 steps a millisecond.
    const int kill_ms = s.ranks > 1 ? std::uniform_int_distribution<int>(250, 800)(rng)
                                    : std::uniform_int_distribution<int>(5, 300)(rng);
    // Every third kill at one of the save's crash points, on one rank.
    const int at_save = killed % 3 == 2 ? killed / 3 : -1;
    const std::string point = at_save < 0 ? ""
                                          : std::string(kSavePoints[at_save % 4]) + "@" +
                                                std::to_string(killed / 2 % s.ranks);
    Killed k = run(config(s.stage, ck, kSteps), ck,
                   at_save < 0 ? std::chrono::milliseconds(kill_ms) : std::chrono::seconds(60),
                   point, s.ranks);
    ASSERT_FALSE(k.ranks_outlived) << "ranks outlived their killed launcher:\n" << k.err;
    s.to = fs::exists(ck + "/latest") ? latest_step(ck) : 0;
    ASSERT_GE(s.to, s.from) << "a run lost a published checkpoint\n" << k.err;
    if (s.to > s.from) chain.push_back(s);
    if (k.finished) {  // before the kill, or a crash point it never reached
      ASSERT_EQ(k.exit_code, 0) << k.err;
      ASSERT_EQ(s.to, kSteps);
      check_chain();
      continue;
    }
    ++killed;
    steps_redone += std::max<int64_t>(0, k.last_step - s.to);
  }
  Segment last{2, 2, fs::exists(ck + "/latest") ? latest_step(ck) : 0, kSteps};
  Killed k = run(config(last.stage, ck, kSteps), ck, std::chrono::minutes(5), "", last.ranks);
  ASSERT_TRUE(k.finished && k.exit_code == 0) << k.err;
  ASSERT_EQ(latest_step(ck), kSteps);
  chain.push_back(last);
  check_chain();
  EXPECT_TRUE(fs::is_empty(dir_.file("nvme"))) << "swap folders were left";
  std::printf(
      "soak across world sizes: %d kills over %d runs; %d chains of %zu resumes at 1 or 2 ranks "
      "replayed without kills, bitwise equal; %lld steps redone, 0 bytes lost\n",
      killed, runs, chains, resumes, static_cast<long long>(steps_redone));
}

}  // namespace
}  // namespace dscore::testing
