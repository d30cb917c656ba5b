// The engine's observability through `dscore run` (issue 6): wall_clock_breakdown
// (DeepSpeed's timer lines and Train/Samples/elapsed_time_ms_* events),
// comms_logger (verbose lines and the summary table, rank 0 only),
// --log-format json (one JSON object per line), the flops profiler report.
#include <gtest/gtest.h>

#include "core/config/json.h"
#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

TEST(CliObservability, WallClockBreakdownLogsTimersAndWritesElapsedTimeEvents) {
  TempDir dir("dscore_cli_obs");
  MlpRunConfig cfg;
  cfg.output_path = dir.path().string();
  cfg.train_steps = 20;
  cfg.extra = R"("wall_clock_breakdown": true)";
  ProcessResult r =
      run_dscore({"run", "--config", dir.write("ds_config.json", cfg.text()).string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // A micro-timer line every step() call; the global line every steps_per_print (10).
  EXPECT_EQ(lines_starting_with(r.err, "[dscore] time (ms) | fwd_microstep: ").size(), 20u)
      << r.err;
  const auto global = lines_starting_with(r.err, "[dscore] time (ms) | fwd: ");
  ASSERT_EQ(global.size(), 2u) << r.err;
  EXPECT_NE(global[0].find("| bwd_allreduce: "), std::string::npos);
  EXPECT_EQ(global[0].find("fwd: 0.00 | bwd: 0.00 |"), std::string::npos)
      << "the line and the monitor events show the same, non-zero, numbers";
  for (const char* tag : {"forward", "backward", "backward_inner", "backward_allreduce", "step"}) {
    const auto rows = split_lines(read_text_file(
        dir.path() / "job" / (std::string("Train_Samples_elapsed_time_ms_") + tag + ".csv")));
    ASSERT_EQ(rows.size(), 21u) << tag;
    EXPECT_EQ(rows[0], std::string("step,elapsed_time_ms_") + tag);
    EXPECT_EQ(rows[1].rfind("32,", 0), 0u) << "post-increment global_samples";
  }
}

TEST(CliObservability, CommsLoggerPrintsVerboseLinesAndASummaryOnRankZero) {
  TempDir dir("dscore_cli_obs");
  MlpRunConfig cfg;
  cfg.train_steps = 3;
  cfg.extra =
      R"("zero_optimization": {"stage": 1}, "comms_logger": {"enabled": false, "verbose": true})";
  ProcessOptions options;
  options.env = mpi_test_env();
  ProcessResult r = run_dscore(
      {"run", "-n", "2", "--config", dir.write("ds_config.json", cfg.text()).string()}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // Enabled by the key's mere presence, as in DeepSpeed (enabled: false is ignored).
  const auto verbose = lines_starting_with(r.err, "[dscore rank 0] [Rank 0] comm op: ");
  EXPECT_GE(verbose.size(), 6u) << r.err;
  EXPECT_TRUE(lines_starting_with(r.err, "[dscore rank 1] [Rank 0]").empty()) << "rank 0 only";
  EXPECT_NE(r.err.find("| algbw (Gbps): "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("comms_logger summary"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("all_gather_into_tensor"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reduce"), std::string::npos) << r.err;
}

TEST(CliObservability, JsonLogFormatGivesOneObjectPerLine) {
  TempDir dir("dscore_cli_obs");
  MlpRunConfig cfg;
  cfg.train_steps = 5;
  ProcessResult r = run_dscore({"run", "--log-format", "json", "--config",
                                dir.write("ds_config.json", cfg.text()).string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  int progress = 0;
  for (const std::string& line : split_lines(r.out + r.err)) {
    if (line.empty()) continue;
    auto v = json::parse(line, "line");
    ASSERT_TRUE(v.ok() && v->is_object()) << line;
    if (v->find("type")->as_string() == "progress") {
      ++progress;
      EXPECT_TRUE(v->find("loss")->is_number());
    }
  }
  EXPECT_EQ(progress, 5);
  EXPECT_EQ(run_dscore({"run", "--log-format", "xml", "--config", "x.json"}).exit_code, 2);
}

TEST(CliObservability, FlopsProfilerWritesTheReportForTheProfileStep) {
  TempDir dir("dscore_cli_obs");
  MlpRunConfig cfg;
  cfg.train_steps = 3;
  const std::string out = (dir.path() / "profile.txt").string();
  cfg.extra =
      R"("flops_profiler": {"enabled": true, "profile_step": 1, "output_file": ")" + out + "\"}";
  ProcessResult r =
      run_dscore({"run", "--config", dir.write("ds_config.json", cfg.text()).string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string report = read_text_file(out);
  EXPECT_NE(report.find("Profile Summary at step 1:"), std::string::npos) << report;
  EXPECT_NE(report.find("fwd flops per GPU:"), std::string::npos) << report;
  EXPECT_NE(report.find("model 'mlp'"), std::string::npos) << report;
}

}  // namespace
}  // namespace dscore::testing
