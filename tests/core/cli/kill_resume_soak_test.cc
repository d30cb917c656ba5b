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

struct Killed {
  bool finished = false;  // it exited before the kill (0: completed)
  int exit_code = -1;
  int64_t last_step = 0;  // the last progress record's step
  std::string err;        // its stderr
};

class KillResumeSoak : public ::testing::Test {
 protected:
  std::string config(int stage, const std::string& checkpoint_dir) {
    return dir_
        .write("stage" + std::to_string(stage) + ".json",
               R"({"train_batch_size": 32, "seed": 1, "train_steps": 1000,
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

  // `dscore run` on `config` (resuming from `checkpoint_dir` when it has a
  // checkpoint), killed with SIGKILL after `kill_after` unless it ends
  // first; `failpoints` set DSCORE_FAILPOINTS.
  Killed run(const std::string& config, const std::string& checkpoint_dir,
             std::chrono::milliseconds kill_after, const std::string& failpoints) {
    std::vector<std::string> args = {"run", "--config", config, "--log-format", "json"};
    if (fs::exists(checkpoint_dir + "/latest"))
      args.insert(args.end(), {"--resume", checkpoint_dir});
    ProcessOptions options;
    options.timeout = kill_after;
    if (!failpoints.empty()) options.env["DSCORE_FAILPOINTS"] = failpoints;
    const ProcessResult r = run_dscore(args, options);
    Killed k;
    k.finished = !r.timed_out && r.signal == 0;
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

  TempDir dir_{"dscore_soak"};
};

TEST_F(KillResumeSoak, EveryKillResumesAndTheEndIsBitwiseTheUninterruptedRun) {
  const char* env = std::getenv("DSCORE_SOAK_KILLS");
  const int kills = env != nullptr ? std::atoi(env) : 20;
  const std::string whole = dir_.file("whole");
  Killed reference = run(config(2, whole), whole, std::chrono::minutes(5), "");
  ASSERT_TRUE(reference.finished && reference.exit_code == 0) << reference.err;

  const std::string ck = dir_.file("ck");
  // The save's crash points, one in three kills; random moments otherwise.
  const char* save_points[] = {"checkpoint.before_latest", "checkpoint.mid_write",
                               "checkpoint.between_files", "checkpoint.before_publish"};
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
                             save_points[at_save_points % 4])
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
  for (const char* file : {"mp_rank_00_model_states.safetensors",
                           "zero_pp_rank_0_mp_rank_00_optim_states.safetensors"}) {
    const auto got = tensors_of(ck + "/global_step1000/" + file);
    const auto want = tensors_of(whole + "/global_step1000/" + file);
    ASSERT_FALSE(want.second.empty()) << file;
    EXPECT_EQ(got.first, want.first) << file;
    EXPECT_TRUE(got.second == want.second) << file << ": the tensors differ";
  }
  EXPECT_TRUE(fs::is_empty(dir_.file("nvme"))) << "swap folders were left";
  std::printf(
      "soak: %d kills (%d at the save's crash points) over %d runs, %lld steps redone, "
      "0 bytes lost\n",
      killed, at_save_points, runs, static_cast<long long>(steps_redone));
}

}  // namespace
}  // namespace dscore::testing
