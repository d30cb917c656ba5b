// `dscore run` (core/cli/run_command.cc over core/cli/run_training.cc) through
// the real executable: a short mlp run trains (the loss falls), prints
// progress, writes DeepSpeed's csv_monitor files (docs/deepspeed-reference.md#monitors);
// --steps overrides train_steps; what this build cannot do yet is a clear
// one-line error with the right exit code, never a silent fallback.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <numeric>
#include <regex>

#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

struct CsvRow {
  long long step;
  double value;
};

// A csv_monitor file: checks the header "step,<name>" and parses the rows.
std::vector<CsvRow> read_csv(const fs::path& file, const std::string& name) {
  std::vector<CsvRow> rows;
  EXPECT_TRUE(fs::exists(file)) << file;
  const std::string text = read_text_file(file);
  // Python's csv.writer ends every row with "\r\n".
  EXPECT_EQ(text.rfind("step," + name + "\r\n", 0), 0u) << file << ":\n" << text;
  std::vector<std::string> lines = split_lines(text);
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t comma = lines[i].find(',');
    EXPECT_NE(comma, std::string::npos) << lines[i];
    if (comma == std::string::npos) continue;
    rows.push_back({std::stoll(lines[i].substr(0, comma)), std::stod(lines[i].substr(comma + 1))});
  }
  return rows;
}

double mean_value(std::vector<CsvRow>::const_iterator begin,
                  std::vector<CsvRow>::const_iterator end) {
  double sum =
      std::accumulate(begin, end, 0.0, [](double s, const CsvRow& r) { return s + r.value; });
  return sum / static_cast<double>(end - begin);
}

// The only stderr line that starts with `prefix`, or "" (and a failure).
std::string only_line(const ProcessResult& r, const std::string& prefix) {
  std::vector<std::string> lines = lines_starting_with(r.err, prefix);
  EXPECT_EQ(lines.size(), 1u) << r.describe();
  return lines.empty() ? "" : lines[0];
}

TEST(CliRun, SmallMlpTrainsPrintsProgressAndWritesDeepSpeedCsvFiles) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.output_path = (dir.path() / "out").string();
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();

  // Progress: DeepSpeed's line every steps_per_print steps, plain progress
  // lines (stdout is not a terminal), and a summary.
  EXPECT_NE(r.out.find("step=10, skipped=0, lr=[0.003], mom=[(0.9, 0.999)]\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step=100, skipped=0, lr=[0.003]"), std::string::npos) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "step=").size(), 10u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "step 1/100 | loss ").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "step 100/100 | loss ").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "done: 100 steps, 3200 samples in ").size(), 1u) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no progress-bar redraws when not a terminal";
  EXPECT_TRUE(lines_starting_with(r.err, "[dscore] error").empty()) << r.err;
  EXPECT_EQ(lines_starting_with(r.err, "[dscore] training model 'mlp'").size(), 1u) << r.err;

  // csv_monitor: output_path/job_name/<tag with '/' -> '_'>.csv.
  const fs::path job = dir.path() / "out" / "job";
  std::vector<CsvRow> loss = read_csv(job / "Train_Samples_train_loss.csv", "train_loss");
  std::vector<CsvRow> lr = read_csv(job / "Train_Samples_lr.csv", "lr");
  ASSERT_EQ(loss.size(), 100u);
  ASSERT_EQ(lr.size(), 100u);
  // x = global_samples: before the step's increment for the loss, after it for the lr.
  EXPECT_EQ(loss.front().step, 0);
  EXPECT_EQ(loss[1].step, 32);
  EXPECT_EQ(loss.back().step, 99 * 32);
  EXPECT_EQ(lr.front().step, 32);
  EXPECT_EQ(lr.back().step, 100 * 32);
  EXPECT_EQ(lr.front().value, 0.003);

  // It learns: over 100 steps the loss more than halves (averaged over ten
  // steps at each end, as single mini-batch losses are noisy).
  const double first = mean_value(loss.begin(), loss.begin() + 10);
  const double last = mean_value(loss.end() - 10, loss.end());
  EXPECT_LT(last, 0.5 * first) << "first ten " << first << ", last ten " << last;
  EXPECT_LT(loss.back().value, 0.5 * loss.front().value);
}

TEST(CliRun, SameConfigAndSeedGiveTheSameLosses) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.train_steps = 20;
  cfg.output_path = (dir.path() / "a").string();
  const fs::path a = dir.write("a.json", cfg.text());
  cfg.output_path = (dir.path() / "b").string();
  const fs::path b = dir.write("b.json", cfg.text());
  ASSERT_EQ(run_dscore({"run", "--config", a.string()}).exit_code, 0);
  ASSERT_EQ(run_dscore({"run", "--config", b.string()}).exit_code, 0);
  const std::string loss_a = read_text_file(dir.path() / "a/job/Train_Samples_train_loss.csv");
  EXPECT_FALSE(loss_a.empty());
  EXPECT_EQ(loss_a, read_text_file(dir.path() / "b/job/Train_Samples_train_loss.csv"));
}

TEST(CliRun, StepsOverridesTrainStepsAndSaysSo) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.output_path = "runs";  // relative: under the working directory, as DeepSpeed
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessOptions options;
  options.cwd = dir.path();
  ProcessResult r = run_dscore({"run", "--config", config.string(), "--steps", "7"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "done: 7 steps, 224 samples in ").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "step 7/7 | loss ").size(), 1u) << r.out;
  EXPECT_EQ(only_line(r, "[dscore] train_steps:"), "[dscore] train_steps: --steps 7 overrides 100");
  EXPECT_EQ(read_csv(dir.path() / "runs/job/Train_Samples_train_loss.csv", "train_loss").size(),
            7u);
}

// The heap policy (core/base/process_heap.h): kept for a run without
// offload, glibc's defaults with it or with DSCORE_MALLOC=system, and a
// wrong DSCORE_MALLOC a usage error naming the values.
TEST(CliRun, KeepsFreedMemoryExceptWithOffloadOrWhenTold) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.train_steps = 2;
  const fs::path plain = dir.write("plain.json", cfg.text());
  cfg.extra = R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}})";
  const fs::path offload = dir.write("offload.json", cfg.text());
  const auto kept = [&](const fs::path& config, std::optional<std::string> malloc_env) {
    ProcessOptions options;
    options.env = {{"DSCORE_LOG_LEVEL", "debug"}, {"DSCORE_MALLOC", malloc_env}};
    const ProcessResult r = run_dscore({"run", "--config", config.string()}, options);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return (r.out + r.err).find("malloc: one arena, freed memory kept") != std::string::npos;
  };
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_TRUE(kept(plain, std::nullopt));  // a sanitizer's allocator takes no mallopt
#endif
  EXPECT_FALSE(kept(plain, "system"));
  EXPECT_FALSE(kept(offload, std::nullopt));
  ProcessOptions wrong;
  wrong.env = {{"DSCORE_MALLOC", "jemalloc"}};
  const ProcessResult r = run_dscore({"run", "--config", plain.string()}, wrong);
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("DSCORE_MALLOC=\"jemalloc\": expected \"keep\""), std::string::npos)
      << r.err;
}

TEST(CliRun, StepsGivesTheCountWhenTheConfigHasNone) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.train_steps = 0;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string(), "--steps", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "done: 3 steps").size(), 1u) << r.out;
}

TEST(CliRun, BundledQuickstartConfigRunsOnTwoRanksAndSavesACheckpoint) {
  // As the README runs it: from a folder with the repository's configs/
  // (the corpus path is relative), 2 ranks, ZeRO-2; outputs under ./runs.
  TempDir dir("dscore_cli_run");
  fs::create_directory_symlink(fs::path(DSCORE_SOURCE_DIR) / "configs", dir.path() / "configs");
  ProcessOptions options;
  options.cwd = dir.path();
  options.env = mpi_test_env();
  ProcessResult r = run_dscore(
      {"run", "-n", "2", "--config", "configs/quickstart.json", "--steps", "5"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "done: 5 steps, 160 samples").size(), 1u) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  EXPECT_EQ(
      read_csv(dir.path() / "runs/quickstart/Train_Samples_train_loss.csv", "train_loss").size(),
      5u);
  EXPECT_TRUE(
      fs::exists(dir.path() / "runs/quickstart/checkpoints/latest"));  // the last step saves
}

TEST(CliRun, TwoRanksUnderMpirunTrainWithOneProgressStreamAndOneMonitor) {
  // `-n 2` hands the job to mpirun; only rank 0 prints progress and writes
  // monitor files; the loss still falls.
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.output_path = dir.path().string();
  cfg.extra = R"("zero_optimization": {"stage": 2})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessOptions options;
  options.env = mpi_test_env();
  ProcessResult r = run_dscore({"run", "--config", config.string(), "-n", "2"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "done: ").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "step=10,").size(), 1u) << r.out;
  EXPECT_NE(r.err.find("ZeRO stage 2, 2 rank(s)"), std::string::npos) << r.err;
  const auto rows =
      split_lines(read_text_file(dir.path() / "job" / "Train_Samples_train_loss.csv"));
  EXPECT_EQ(rows.size(), 101u) << "one header, one row per step, from rank 0 only";
}

TEST(CliRun, EachRankSaysItsComputeThreadsAndAMalformedOmpNumThreadsIsNamed) {
  // --threads reaches every rank under mpirun, and each says what it uses.
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.output_path = dir.path().string();
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessOptions options;
  options.env = mpi_test_env();
  ProcessResult r = run_dscore(
      {"run", "--config", config.string(), "-n", "2", "--threads", "1", "--steps", "2"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* rank : {"[dscore rank 0] compute threads: 1 (requested",
                           "[dscore rank 1] compute threads: 1 (requested"})
    EXPECT_NE(r.err.find(rank), std::string::npos) << rank << "\n" << r.err;

  // Without --threads, OMP_NUM_THREADS decides, as it does for PyTorch.
  options.env["OMP_NUM_THREADS"] = "1";
  r = run_dscore({"run", "--config", config.string(), "--steps", "2"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("compute threads: 1 (OMP_NUM_THREADS"), std::string::npos) << r.err;

  options.env["OMP_NUM_THREADS"] = "four";
  r = run_dscore({"run", "--config", config.string(), "--steps", "2"}, options);
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_NE(r.err.find("OMP_NUM_THREADS='four' is not a positive whole number"), std::string::npos)
      << r.err;

  r = run_dscore({"run", "--config", config.string(), "--threads", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("--threads must be at least 1"), std::string::npos) << r.err;
}

// DeepSpeed optimizer names a config may give: FusedAdam and FusedLamb
// (DeepSpeed's class names, dscore's adam and lamb), ZeroOneAdam and
// OneBitLamb (1-bit communication; on one rank, and on two for the 1-bit
// ones, which then compress through the job's communicator). Each trains:
// the loss of the last 10 steps is below that of the first 10.
TEST(CliRun, DeepSpeedOptimizerNamesTrain) {
  struct Case {
    const char* optimizer;
    int ranks;
  };
  const Case cases[] = {
      {R"({"type": "FusedAdam", "params": {"lr": 0.003}})", 1},
      {R"({"type": "FusedLamb", "params": {"lr": 0.01}})", 1},
      {R"({"type": "ZeroOneAdam", "params": {"lr": 0.003, "var_freeze_step": 20}})", 1},
      {R"({"type": "OneBitLamb", "params": {"lr": 0.01, "freeze_step": 20}})", 1},
      {R"({"type": "zerooneadam", "params": {"lr": 0.003, "var_freeze_step": 20}})", 2},
      {R"({"type": "onebitlamb", "params": {"lr": 0.01, "freeze_step": 20}})", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.optimizer) + " on " + std::to_string(c.ranks) + " rank(s)");
    TempDir dir("dscore_cli_run");
    MlpRunConfig cfg;
    cfg.optimizer = c.optimizer;
    cfg.output_path = dir.path().string();
    cfg.train_steps = 60;
    const fs::path config = dir.write("ds_config.json", cfg.text());
    ProcessOptions options;
    std::vector<std::string> args = {"run", "--config", config.string()};
    if (c.ranks > 1) {
      options.env = mpi_test_env();
      args.insert(args.end(), {"-n", std::to_string(c.ranks)});
    }
    ProcessResult r = run_dscore(args, options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(lines_starting_with(r.out, "done: 60 steps").size(), 1u) << r.out;
    const auto rows = read_csv(dir.path() / "job" / "Train_Samples_train_loss.csv", "train_loss");
    ASSERT_EQ(rows.size(), 60u);
    EXPECT_LT(mean_value(rows.end() - 10, rows.end()), mean_value(rows.begin(), rows.begin() + 10));
  }
}

TEST(CliRun, BadNumbersOnTheCommandLineAreUsageErrors) {
  TempDir dir("dscore_cli_run");
  const fs::path config = dir.write("ds_config.json", MlpRunConfig().text());
  ProcessResult r = run_dscore({"run", "--config", config.string(), "--steps", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.err, "dscore: --steps must be a positive number of optimizer steps\n");
  r = run_dscore({"run", "--config", config.string(), "-n", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.err, "dscore: -n must be at least 1\n");
  r = run_dscore({"run"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(split_lines(r.err)[0].find("'--config' is required"), std::string::npos) << r.err;
}

TEST(CliRun, MissingTrainStepsIsAConfigErrorSayingHowToFixIt) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.train_steps = 0;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.out, "");
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0], "error: " + config.string() +
                          ": train_steps: `dscore run` needs the number of optimizer steps: set "
                          "\"train_steps\" or pass --steps N");
}

TEST(CliRun, MissingModelSectionIsAConfigError) {
  TempDir dir("dscore_cli_run");
  const fs::path config =
      dir.write("ds_config.json",
                R"({"train_batch_size": 8, "optimizer": {"type": "adam"}, "train_steps": 2})");
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: " + config.string() +
                               ": model: `dscore run` needs a \"model\" "
                               "section",
                           0),
            0u)
      << lines[0];
}

TEST(CliRun, ConfigErrorsAreReportedAsByConfigCheck) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.extra = R"("zero_optimisation": {"stage": 0})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0], "error: " + config.string() +
                          ":7:3: zero_optimisation: unknown key \"zero_optimisation\"; did you "
                          "mean \"zero_optimization\"?");
}

// ZeRO-Offload trains and the log says where the optimizer state is.
TEST(CliRun, CpuOptimizerOffloadTrainsAndSaysWhereTheStateIs) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.extra = R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("optimizer state in pinned host memory (ZeRO-Offload: "), std::string::npos)
      << r.describe();
  EXPECT_GT(lines_starting_with(r.out, "step ").size(), 0u) << r.describe();
}

TEST(CliRun, NvmeOffloadWithTooFewBuffersIsAConfigErrorNamingBufferCount) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.extra = R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", )"
              R"("nvme_path": ")" +
              dir.path().string() + R"(", "buffer_count": 1, "pipeline_read": true}})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_GE(lines_starting_with(r.err, "error: " + config.string()).size(), 1u) << r.describe();
  EXPECT_NE(r.err.find("zero_optimization.offload_optimizer.buffer_count: buffer_count 1 is fewer "
                       "than the 2 tile buffers"),
            std::string::npos)
      << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "step ").size(), 0u) << "no training happened";
}

// One rank whose plan does not fit its node ends every rank at once, with
// the same exit code and one message (rank 0's), not the others waiting
// for it until the comm deadline (here 2 minutes).
TEST(CliRun, APlanOneRankRefusesEndsEveryRankWithOneMessage) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.extra = R"("zero_optimization": {"stage": 2}, "comm": {"timeout_ms": 120000})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessOptions options;
  options.env = mpi_test_env();
  options.env["DSCORE_FAILPOINTS"] = "engine.plan_refused@1";
  options.timeout = std::chrono::seconds(100);
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_dscore({"run", "--config", config.string(), "-n", "2"}, options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << r.describe();
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  size_t said = 0;
  for (size_t at = 0; (at = r.err.find("rank 1: the plan does not fit", at)) != std::string::npos;
       ++at)
    ++said;
  EXPECT_EQ(said, 1u) << r.err;
  EXPECT_EQ(lines_starting_with(r.out, "step ").size(), 0u) << r.out;
}

TEST(CliRun, RanksEndWithTheirLauncherWhenItIsKilled) {
  // mpirun killed with SIGKILL cannot stop its ranks; they end by themselves
  // (parent-death signal) instead of training on. They print nothing while
  // they train, so no broken pipe stops them either.
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.train_steps = 100000000;
  std::string text = cfg.text();
  text.replace(text.find("\"steps_per_print\": 10"), 21, "\"steps_per_print\": 100000000");
  const fs::path config = dir.write("ds_config.json", text);
  ProcessOptions options;
  options.env = mpi_test_env();
  options.timeout = std::chrono::seconds(8);  // mpirun and two ASan ranks start in 1-4 s
  options.descendants_grace = std::chrono::seconds(10);
  ProcessResult r = run_dscore({"run", "--config", config.string(), "-n", "2"}, options);
  ASSERT_TRUE(r.timed_out) << r.describe();
  ASSERT_NE(r.err.find("training model"), std::string::npos) << "killed before training\n"
                                                             << r.describe();
  EXPECT_FALSE(r.descendants_outlived) << r.describe();
}

TEST(CliRun, AHostfileOnThisHostTrainsAsMinusNDoes) {
  // DeepSpeed's hostfile through mpirun's host list: the same job as -n 2.
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  const fs::path hostfile = dir.write("hostfile", "# this machine\nlocalhost slots=2\n");
  ProcessOptions options;
  options.env = mpi_test_env();
  ProcessResult hosts =
      run_dscore({"run", "--config", config.string(), "--hostfile", hostfile.string()}, options);
  ASSERT_EQ(hosts.exit_code, 0) << hosts.describe();
  ProcessResult local = run_dscore({"run", "--config", config.string(), "-n", "2"}, options);
  ASSERT_EQ(local.exit_code, 0) << local.describe();
  const auto final_line = [](const std::string& out) {
    const auto lines = lines_starting_with(out, "done: ");
    return lines.empty() ? std::string() : lines.back().substr(lines.back().find("final loss"));
  };
  EXPECT_FALSE(final_line(hosts.out).empty()) << hosts.describe();
  EXPECT_EQ(final_line(hosts.out), final_line(local.out));
  EXPECT_NE(hosts.err.find("2 rank(s)"), std::string::npos) << hosts.err;
}

TEST(CliRun, DryRunPrintsTheLauncherCommandForEachLauncher) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  const fs::path hostfile = dir.write("hostfile", "node-a slots=4\nnode-b slots=4\n");
  ProcessOptions options;
  options.env["SLURM_JOB_ID"] = std::nullopt;
  options.env["MASTER_PORT"] = std::nullopt;
  ProcessResult mpi = run_dscore({"run", "--config", config.string(), "--hostfile",
                                  hostfile.string(), "--num_gpus", "2", "--dry-run"},
                                 options);
  ASSERT_EQ(mpi.exit_code, 0) << mpi.describe();
  EXPECT_NE(mpi.out.find("MASTER_ADDR=node-a MASTER_PORT=29500 "), std::string::npos) << mpi.out;
  EXPECT_NE(mpi.out.find("mpirun -n 4 --host node-a:2,node-b:2 --bind-to none"), std::string::npos)
      << mpi.out;
  EXPECT_NE(mpi.out.find(" run --config " + config.string()), std::string::npos) << mpi.out;
  // The key-value store's secret goes to every host, and is not printed.
  EXPECT_NE(mpi.out.find("DSCORE_JOB_TOKEN=<secret> "), std::string::npos) << mpi.out;
  EXPECT_NE(mpi.out.find("-x DSCORE_JOB_TOKEN"), std::string::npos) << mpi.out;
  options.env["SLURM_JOB_ID"] = "7";
  ProcessResult srun = run_dscore({"run", "--config", config.string(), "--hostfile",
                                   hostfile.string(), "--include", "node-b", "--dry-run"},
                                  options);
  ASSERT_EQ(srun.exit_code, 0) << srun.describe();
  EXPECT_NE(srun.out.find("srun --nodes=1 --ntasks=4 --ntasks-per-node=4 --nodelist=node-b"),
            std::string::npos)
      << srun.out;
  ProcessResult local = run_dscore({"run", "--config", config.string(), "-n", "3", "--dry-run"});
  ASSERT_EQ(local.exit_code, 0) << local.describe();
  EXPECT_NE(local.out.find("mpirun -n 3 --oversubscribe"), std::string::npos) << local.out;
}

TEST(CliRun, LauncherFlagsAreRefusedWhereTheyWouldBeIgnored) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  const fs::path hostfile = dir.write("hostfile", "node-a slots=2\n");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--include", "node-a"}, "--include chooses hosts of a --hostfile"},
      {{"--launcher", "openmpi"}, "--launcher starts the hosts of a --hostfile"},
      {{"--dry-run"}, "one local rank has none"},
      {{"--hostfile", hostfile.string(), "-n", "2"}, "-n counts local ranks"},
      {{"--hostfile", hostfile.string(), "--num_nodes", "2"},
       "--num_nodes 2: the hostfile lists 1"},
      {{"--hostfile", dir.file("missing")}, "cannot read it"},
      {{"--hostfile", hostfile.string(), "--master_port", "0"},
       "--master_port 0 is not a TCP port"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", "--config", config.string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    ProcessResult r = run_dscore(args);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.says << "\n" << r.describe();
  }
}

TEST(CliRun, TwoRanksGetMasterAddrAndPortForTheJobsKeyValueStore) {
  // `-n 2` gives its ranks MASTER_ADDR=127.0.0.1 and a free MASTER_PORT: both
  // ranks name the same store (core/comm/job_store.h).
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessOptions options;
  options.env = mpi_test_env();
  options.env["DSCORE_LOG_LEVEL"] = "debug";
  options.env["MASTER_ADDR"] = std::nullopt;
  options.env["MASTER_PORT"] = std::nullopt;
  ProcessResult r =
      run_dscore({"run", "--config", config.string(), "-n", "2", "--steps", "1"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::regex line(
      R"(\[dscore rank ([01])\] debug: job key-value store: 127\.0\.0\.1:(\d+) )");
  std::map<std::string, std::string> port_of_rank;
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), line), end; it != end; ++it)
    port_of_rank[(*it)[1]] = (*it)[2];
  ASSERT_EQ(port_of_rank.size(), 2u) << r.err;
  EXPECT_EQ(port_of_rank["0"], port_of_rank["1"]);
  EXPECT_NE(std::stoi(port_of_rank["0"]), 0);
}

TEST(CliRun, LoopbackRanksInSeparateProcessesAreRefusedNotFollowed) {
  // The job's store now carries rank 0's value to rank 1's process; the
  // loopback backend (ranks as threads) must refuse what it receives there.
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.extra = R"("comm": {"backend": "loopback", "timeout_ms": 5000})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessOptions options;
  options.env = mpi_test_env();
  options.env["MASTER_ADDR"] = std::nullopt;
  options.env["MASTER_PORT"] = std::nullopt;
  ProcessResult r =
      run_dscore({"run", "--config", config.string(), "-n", "2", "--steps", "1"}, options);
  EXPECT_TRUE(r.exited() && r.exit_code != 0) << r.describe();
  EXPECT_NE(r.err.find("loopback rank 1: rank 0 runs in another process"), std::string::npos)
      << r.describe();
}

TEST(CliRun, Fp16TrainsAndLogsTheLossScale) {
  TempDir dir("dscore_cli_run");
  MlpRunConfig cfg;
  cfg.output_path = dir.path().string();
  cfg.extra = R"("fp16": {"enabled": true, "initial_scale_power": 10})";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult r = run_dscore({"run", "--config", config.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const auto rows =
      split_lines(read_text_file(dir.path() / "job" / "Train_Samples_loss_scale.csv"));
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0], "step,loss_scale");
  // Post-increment x, scale after the update (docs/deepspeed-reference.md#monitors).
  EXPECT_EQ(rows[1], "32,1024.0");
}

// --resume from a checkpoint already at train_steps trains nothing, says so,
// and prints no rate (it used to print "0 steps ... -301011210 tokens/s").
TEST(CliRun, ResumeAtTrainStepsTrainsNothingAndSaysSo) {
  TempDir dir("dscore_cli_run");
  const std::string ck = (dir.path() / "ck").string();
  MlpRunConfig cfg;
  cfg.train_steps = 4;
  cfg.extra = "\"checkpoint_dir\": \"" + ck + "\", \"save_interval\": 2";
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ASSERT_EQ(run_dscore({"run", "--config", config.string()}).exit_code, 0);

  ProcessResult r = run_dscore({"run", "--config", config.string(), "--resume", ck});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "done: nothing trained, already at step 4 of 4\n") << r.describe();
  EXPECT_EQ(only_line(r, "[dscore] the checkpoint in "),
            "[dscore] the checkpoint in " + ck +
                " is already at step 4 of train_steps 4: nothing to train (raise train_steps or "
                "pass --steps N to train further)");
  EXPECT_TRUE(lines_starting_with(r.err, "[dscore] error").empty()) << r.err;
}

// --resume on a folder DeepSpeed's layout holds (here dscore's own export
// to it): converted into checkpoint_dir/imported-deepspeed and resumed,
// with the losses of resuming the dscore checkpoint it came from.
TEST(CliRun, ResumesFromADeepSpeedCheckpointByConvertingItFirst) {
  TempDir dir("dscore_cli_run");
  const std::string ck = (dir.path() / "ck").string();
  const std::string zero = R"("zero_optimization": {"stage": 2})";
  MlpRunConfig cfg;
  cfg.train_steps = 4;
  cfg.extra = zero + ", \"checkpoint_dir\": \"" + ck + "\", \"save_interval\": 4";
  ASSERT_EQ(run_dscore({"run", "--config", dir.write("first.json", cfg.text()).string()}).exit_code,
            0);
  const std::string ds = (dir.path() / "ds").string();
  ProcessResult exported =
      run_dscore({"checkpoint", "export-deepspeed", ck, ds, "--world-size", "1"});
  ASSERT_EQ(exported.exit_code, 0) << exported.describe();
  const auto resume = [&](const std::string& name, const std::string& from) {
    MlpRunConfig more;
    more.train_steps = 8;
    more.output_path = dir.path().string();
    more.job_name = name;
    more.extra = zero + ", \"checkpoint_dir\": \"" + (dir.path() / (name + "_ck")).string() + "\"";
    return run_dscore(
        {"run", "--config", dir.write(name + ".json", more.text()).string(), "--resume", from});
  };
  ProcessResult native = resume("native", ck);
  ASSERT_EQ(native.exit_code, 0) << native.describe();
  ProcessResult converted = resume("converted", ds);
  ASSERT_EQ(converted.exit_code, 0) << converted.describe();
  EXPECT_NE(converted.err.find("converted DeepSpeed's checkpoint global_step4 of " + ds),
            std::string::npos)
      << converted.err;
  EXPECT_TRUE(fs::exists(dir.path() / "converted_ck" / "imported-deepspeed" / "latest"));
  const auto losses = [&](const std::string& name) {
    return read_csv_values(dir.path() / name / "Train_Samples_train_loss.csv");
  };
  ASSERT_EQ(losses("native").size(), 4u);
  EXPECT_EQ(losses("converted"), losses("native"));
}

// Muon's momentum is optimizer state like any other: a resumed run
// continues as the uninterrupted one, bit for bit; export to DeepSpeed's
// layout (Adam's groups) refuses it by name.
TEST(CliRun, MuonResumesExactlyAndItsExportIsRefused) {
  TempDir dir("dscore_cli_run");
  const std::string ck = (dir.path() / "ck").string();
  const std::string zero = R"("zero_optimization": {"stage": 2})";
  const auto config = [&](const std::string& name, int steps, const std::string& checkpoints) {
    MlpRunConfig cfg;
    cfg.optimizer = R"({"type": "Muon", "params": {"muon_lr": 0.01, "adam_lr": 0.003}})";
    cfg.train_steps = steps;
    cfg.output_path = dir.path().string();
    cfg.job_name = name;
    cfg.extra = zero + ", \"checkpoint_dir\": \"" + checkpoints + "\", \"save_interval\": 3";
    return dir.write(name + ".json", cfg.text()).string();
  };
  ASSERT_EQ(run_dscore({"run", "--config", config("whole", 6, ck)}).exit_code, 0);
  fs::copy(ck, ck + "3", fs::copy_options::recursive);
  dir.write("ck3/latest", "global_step3");
  ProcessResult resumed =
      run_dscore({"run", "--config", config("resumed", 6, ck + "_more"), "--resume", ck + "3"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  const auto losses = [&](const std::string& name) {
    return read_csv_values(dir.path() / name / "Train_Samples_train_loss.csv");
  };
  const std::vector<double> whole = losses("whole");
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_EQ(losses("resumed"), std::vector<double>(whole.begin() + 3, whole.end()));
  ProcessResult exported = run_dscore(
      {"checkpoint", "export-deepspeed", ck, (dir.path() / "ds").string(), "--world-size", "1"});
  EXPECT_NE(exported.exit_code, 0);
  EXPECT_NE(exported.err.find("optimizer muon"), std::string::npos) << exported.describe();
}

// With bf16 masters and bf16 optimizer state the checkpoint holds what the
// run keeps (widened to fp32): a resumed run equals the uninterrupted one.
TEST(CliRun, Bf16MasterRunResumesExactly) {
  TempDir dir("dscore_cli_run");
  const std::string ck = (dir.path() / "ck").string();
  const auto config = [&](const std::string& name, const std::string& checkpoints) {
    MlpRunConfig cfg;
    cfg.train_steps = 6;
    cfg.output_path = dir.path().string();
    cfg.job_name = name;
    cfg.extra = R"("zero_optimization": {"stage": 2}, "bf16": {"enabled": true, )"
                R"("bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, )"
                "\"checkpoint_dir\": \"" +
                checkpoints + "\", \"save_interval\": 3";
    return dir.write(name + ".json", cfg.text()).string();
  };
  ASSERT_EQ(run_dscore({"run", "--config", config("whole", ck)}).exit_code, 0);
  fs::copy(ck, ck + "3", fs::copy_options::recursive);
  dir.write("ck3/latest", "global_step3");
  ProcessResult resumed =
      run_dscore({"run", "--config", config("resumed", ck + "_more"), "--resume", ck + "3"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  const auto losses = [&](const std::string& name) {
    return read_csv_values(dir.path() / name / "Train_Samples_train_loss.csv");
  };
  const std::vector<double> whole = losses("whole");
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_EQ(losses("resumed"), std::vector<double>(whole.begin() + 3, whole.end()));
}

TEST(CliRun, MissingConfigFileIsNamed) {
  ProcessResult r = run_dscore({"run", "--config", "/nonexistent/ds_config.json"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.err,
            "error: /nonexistent/ds_config.json: cannot read config file: No such file or "
            "directory\n");
}

}  // namespace
}  // namespace dscore::testing
