// `dscore loss-scale` (core/cli/loss_scale_command.cc) through the real
// executable: the CSV trace of the fp16 loss scale for an overflow pattern,
// compared line by line with DeepSpeed's DynamicLossScaler, the error at the
// minimum scale (exit 1), and usage and config errors (exit 2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

ProcessResult loss_scale(const std::string& fp16, const std::string& pattern) {
  TempDir dir("dscore_cli_loss_scale");
  const std::string file =
      dir.write("ds_config.json", "{\"train_batch_size\": 1, \"fp16\": " + fp16 + "}").string();
  return run_dscore({"loss-scale", "--config", file, "--overflows", pattern});
}

// The scale and hysteresis columns are DeepSpeed 0.19.8's DynamicLossScaler
// (init_scale 1024, scale_window 3, delayed_shift 2, min_scale 1) after each
// update_scale() call for the same pattern, run with /work/ds-venv/bin/python.
TEST(CliLossScale, TraceMatchesDeepSpeedsDynamicLossScaler) {
  ProcessResult r = loss_scale(
      R"({"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3, "hysteresis": 2})",
      "OOCCCCOCCCCCOO");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(split_lines(r.out),
            (std::vector<std::string>{"update,overflow,loss_scale,hysteresis", "0,,1024.0,2",
                                      "1,1,1024.0,1", "2,1,512.0,1", "3,0,512.0,1", "4,0,512.0,1",
                                      "5,0,512.0,1", "6,0,1024.0,2", "7,1,1024.0,1", "8,0,1024.0,1",
                                      "9,0,1024.0,1", "10,0,1024.0,1", "11,0,2048.0,2",
                                      "12,0,2048.0,2", "13,1,2048.0,1", "14,1,1024.0,1"}));
  EXPECT_EQ(r.err, "");
}

// DeepSpeed raises "Current loss scale already at minimum" at the 9th update
// of this pattern (init 4, window 2, hysteresis 2, min 1).
TEST(CliLossScale, OverflowAtTheMinimumEndsTheTrace) {
  ProcessResult r = loss_scale(
      R"({"enabled": true, "initial_scale_power": 2, "loss_scale_window": 2})", "OOOCCCOOO");
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_EQ(split_lines(r.out).back(), "8,1,1.0,1");
  EXPECT_NE(r.err.find("error: update 9: fp16 gradient overflow with the loss scale already at "
                       "its minimum (1, fp16.min_loss_scale)"),
            std::string::npos)
      << r.err;
}

TEST(CliLossScale, UsageAndConfigErrors) {
  ProcessResult bad = loss_scale(R"({"enabled": true})", "OXC");
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
  EXPECT_NE(bad.err.find("'X' is not a step"), std::string::npos) << bad.err;
  ProcessResult off = loss_scale(R"({"enabled": false})", "OC");
  EXPECT_EQ(off.exit_code, 2) << off.describe();
  EXPECT_NE(off.err.find("without fp16"), std::string::npos) << off.err;
  ProcessResult floor = loss_scale(R"({"enabled": true, "min_loss_scale": 0})", "OC");
  EXPECT_EQ(floor.exit_code, 2) << floor.describe();
  EXPECT_NE(floor.err.find("fp16.min_loss_scale: must be >= 1, got 0"), std::string::npos)
      << floor.err;
  ProcessResult help = run_dscore({"loss-scale", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.rfind("usage: dscore loss-scale --config F --overflows PATTERN", 0), 0u)
      << help.out;
}

}  // namespace
}  // namespace dscore::testing
