// `dscore autotune` through the real executable (docs/autotuning.md): the
// trials it runs and the best config it writes, which `config check`
// accepts and `dscore run` trains; candidates whose plan does not fit the
// memory given are listed and never started; a trial that crashes (a
// fault-injecting optimizer) is recorded and the search goes on.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/config/json.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

// The quickstart's GPT, small: its activations grow by megabytes per
// sample, so micro-batch sizes differ clearly in the plan.
std::string gpt_config(const std::string& stage, const std::string& optimizer,
                       const std::string& autotuning) {
  return R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 16,
  "zero_optimization": {"stage": )" +
         stage + R"(},
  "optimizer": )" +
         optimizer + R"(,
  "csv_monitor": {"enabled": true, "output_path": "runs", "job_name": "tune"},
  "model": {"type": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64,
            "vocab_size": 256},
  "data": {"type": "text", "path": "data.txt"},
  "train_steps": 400,
  "checkpoint_dir": "checkpoints",
  "save_interval": 100,
  "seed": 42,
  "autotuning": )" +
         autotuning + "\n}\n";
}

const char* kAdam = R"({"type": "AdamW", "params": {"lr": 0.001}})";

class CliAutotune : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
    dir_.write("data.txt", text);
  }
  ProcessResult autotune(const std::string& config_text, const std::vector<std::string>& flags,
                         EnvOverrides env = {}) {
    const std::string config = dir_.write("ds_config.json", config_text).string();
    std::vector<std::string> args = {"autotune", "--config", config};
    args.insert(args.end(), flags.begin(), flags.end());
    ProcessOptions options;
    options.cwd = dir_.path();
    options.env = std::move(env);
    options.timeout = std::chrono::seconds(300);
    return run_dscore(args, options);
  }
  json::Value results(const std::string& results_dir) {
    auto v = json::parse_file((dir_.path() / results_dir / "results.json").string());
    EXPECT_TRUE(v.ok()) << v.status().message();
    return v.ok() ? *v : json::Value::object();
  }
  static const json::Value* candidate(const json::Value& results, const std::string& name) {
    for (const json::Value& c : results.find("candidates")->items())
      if (c.find("name")->as_string() == name) return &c;
    return nullptr;
  }
  TempDir dir_{"dscore_cli_autotune"};
};

TEST_F(CliAutotune, WritesABestConfigThatChecksAndTrains) {
  ProcessResult r = autotune(gpt_config("[0, 2]", kAdam,
                                        R"({"start_profile_step": 2, "end_profile_step": 3,
                     "num_tuning_micro_batch_sizes": 2, "results_dir": "res", "exps_dir": "exps"})"),
                             {"--log-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // One JSON object per trial and per confirmation run, then the result.
  int trials = 0, confirmations = 0;
  std::string best;
  for (const std::string& line : split_lines(r.out)) {
    auto v = json::parse(line, "stdout");
    ASSERT_TRUE(v.ok()) << line;
    const std::string type = v->find("type")->as_string();
    if (type == "autotune_trial") {
      ++trials;
      EXPECT_EQ(v->find("state")->as_string(), "ran") << line;
      EXPECT_GT(v->find("metric")->as_number(), 0) << line;
    }
    if (type == "autotune_confirmation") {
      ++confirmations;
      EXPECT_EQ(v->find("runs")->as_int(), 2) << line;
    }
    if (type == "autotune_result") best = v->find("best")->as_string();
  }
  EXPECT_EQ(confirmations, 3) << r.out;  // the best three, once more each
  // Stages 0 and 2 at micro-batch 32 and 16 (gas 1 and 2); the user's own
  // settings name a list of stages, so it is no candidate of its own.
  EXPECT_EQ(trials, 4) << r.out;
  const json::Value all = results("res");
  for (const char* name : {"z0_mb32_gas1", "z0_mb16_gas2", "z2_mb32_gas1", "z2_mb16_gas2"}) {
    const json::Value* c = candidate(all, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_TRUE(fs::exists(dir_.path() / "exps" / name / "stdout.log")) << name;
    EXPECT_GT(c->find("plan_host_bytes_per_rank")->as_int(), 0);
    EXPECT_GT(c->find("peak_rss_bytes")->as_int(), 0);
  }
  EXPECT_EQ(all.find("best")->as_string(), best);
  EXPECT_TRUE(fs::exists(dir_.path() / "res" / "summary.txt"));
  // Trials wrote no checkpoints and no monitor files.
  EXPECT_FALSE(fs::exists(dir_.path() / "checkpoints"));
  EXPECT_FALSE(fs::exists(dir_.path() / "runs"));

  const std::string best_config = (dir_.path() / "res" / "best_config.json").string();
  auto written = json::parse_file(best_config);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->find("autotuning"), nullptr);
  EXPECT_EQ(written->find("train_batch_size")->as_int(), 32);
  EXPECT_EQ(written->find("train_steps")->as_int(), 400);  // the user's, not the trial's
  ProcessOptions at_dir;
  at_dir.cwd = dir_.path();
  EXPECT_EQ(run_dscore({"config", "check", best_config}, at_dir).exit_code, 0);
  ProcessResult trained = run_dscore({"run", "--config", best_config, "--steps", "2"}, at_dir);
  EXPECT_EQ(trained.exit_code, 0) << trained.describe();
}

TEST_F(CliAutotune, CandidatesThatDoNotFitAreNeverStarted) {
  const std::string tuning = R"({"start_profile_step": 1, "end_profile_step": 1,
      "num_tuning_micro_batch_sizes": 2, "results_dir": "all", "exps_dir": "all_exps"})";
  ProcessResult first = autotune(gpt_config("2", kAdam, tuning), {});
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  const json::Value planned = results("all");
  const json::Value* small = candidate(planned, "user_z2_mb16_gas2");
  const json::Value* large = candidate(planned, "z2_mb32_gas1");
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  const int64_t fits = small->find("plan_host_bytes_per_rank")->as_int();
  const int64_t too_much = large->find("plan_host_bytes_per_rank")->as_int();
  ASSERT_GT(too_much - fits, 4 << 20);  // activations: megabytes apart

  // RAM between the two plans: micro-batch 32 is listed, not started.
  std::string limited = tuning;
  limited.replace(limited.find("\"all\""), 5, "\"lim\"");
  limited.replace(limited.find("\"all_exps\""), 10, "\"lim_exps\"");
  ProcessResult r = autotune(gpt_config("2", kAdam, limited),
                             {"--memory", std::to_string((fits + too_much) / 2)});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const json::Value got = results("lim");
  const json::Value* skipped = candidate(got, "z2_mb32_gas1");
  ASSERT_NE(skipped, nullptr) << r.out;
  EXPECT_EQ(skipped->find("state")->as_string(), "skipped");
  EXPECT_NE(skipped->find("reason")->as_string().find("does not fit"), std::string::npos)
      << skipped->find("reason")->as_string();
  EXPECT_FALSE(fs::exists(dir_.path() / "lim_exps" / "z2_mb32_gas1"));
  EXPECT_EQ(candidate(got, "user_z2_mb16_gas2")->find("state")->as_string(), "ran");
  EXPECT_NE(r.out.find("skipped by the plan (never started)"), std::string::npos) << r.out;

  // Nothing fits: nothing runs, and the error says so.
  ProcessResult none = autotune(gpt_config("2", kAdam, tuning), {"--memory", "1MB"});
  EXPECT_EQ(none.exit_code, 1) << none.describe();
  EXPECT_NE(none.err.find("error: no candidate fits this node"), std::string::npos) << none.err;
}

TEST_F(CliAutotune, ACrashingTrialIsRecordedAndTheSearchGoesOn) {
  EnvOverrides env = mpi_test_env();
  env["DSCORE_PLUGIN_PATH"] = std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_trial_segv";
  env["DSCORE_FAKE_SEGV_TRIAL"] = "z0_";  // every stage-0 trial crashes
  // The sanitizers leave the segfault to dscore's own handler.
  for (const char* variable : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* current = std::getenv(variable);
    env[variable] = (current != nullptr && *current != '\0' ? std::string(current) + ":" : "") +
                    "handle_segv=0";
  }
  ProcessResult r =
      autotune(gpt_config("[0, 1]", R"({"type": "fake_trial_segv", "params": {"lr": 0.01}})",
                          R"({"start_profile_step": 1, "end_profile_step": 2,
                     "num_tuning_micro_batch_sizes": 1, "results_dir": "res"})"),
               {}, env);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const json::Value all = results("res");
  const json::Value* crashed = candidate(all, "z0_mb32_gas1");
  ASSERT_NE(crashed, nullptr) << r.out;
  EXPECT_EQ(crashed->find("state")->as_string(), "failed");
  EXPECT_NE(crashed->find("reason")->as_string().find("killed by signal 11"), std::string::npos)
      << crashed->find("reason")->as_string();
  const json::Value* ran = candidate(all, "z1_mb32_gas1");
  ASSERT_NE(ran, nullptr);
  EXPECT_EQ(ran->find("state")->as_string(), "ran");
  EXPECT_EQ(all.find("best")->as_string(), "z1_mb32_gas1");
  EXPECT_NE(r.out.find("z0_mb32_gas1: failed: killed by signal 11"), std::string::npos) << r.out;
}

TEST_F(CliAutotune, RefusesWhatItCannotDo) {
  ProcessResult hostfile = autotune(gpt_config("2", kAdam, "{}"), {"--hostfile", "hosts"});
  EXPECT_EQ(hostfile.exit_code, 2);
  EXPECT_NE(hostfile.err.find("--hostfile"), std::string::npos) << hostfile.err;
  ProcessResult metric_path = autotune(gpt_config("2", kAdam, R"({"metric_path": "m.json"})"), {});
  EXPECT_EQ(metric_path.exit_code, 2);
  EXPECT_NE(metric_path.err.find("autotuning.metric_path"), std::string::npos) << metric_path.err;
  ProcessResult window =
      autotune(gpt_config("2", kAdam, R"({"start_profile_step": 5, "end_profile_step": 3})"), {});
  EXPECT_EQ(window.exit_code, 2);
  EXPECT_NE(window.err.find("end_profile_step"), std::string::npos) << window.err;
  ProcessResult stage = autotune(gpt_config("\"some\"", kAdam, "{}"), {});
  EXPECT_EQ(stage.exit_code, 2);
  EXPECT_NE(stage.err.find("zero_optimization.stage"), std::string::npos) << stage.err;
}

}  // namespace
}  // namespace dscore::testing
