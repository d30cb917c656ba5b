// `dscore lr-schedule` (core/cli/lr_schedule_command.cc) through the real executable: the CSV
// values are exactly what training applies at each optimizer step (update k uses the scheduler
// point at t = k - 2: the constructor value, then one scheduler step after every update,
// docs/deepspeed-reference.md#how-the-engine-drives-schedulers), momentum columns for OneCycle, the
// optimizer's lr without a scheduler and as WarmupCosineLR's peak, "auto" resolved against --steps,
// the default table and plot, and config errors reported like `dscore config check`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<double>> rows;  // empty cells read as NaN
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

Csv parse_csv(const std::string& text) {
  Csv csv;
  std::vector<std::string> lines = split_lines(text);
  if (lines.empty()) return csv;
  csv.header = split(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    std::vector<double> row;
    for (const std::string& c : split(lines[i]))
      row.push_back(c.empty() ? std::nan("") : std::strtod(c.c_str(), nullptr));
    csv.rows.push_back(row);
  }
  return csv;
}

struct Preview {
  TempDir dir{"dscore_cli_lr_schedule"};
  std::string file;
  ProcessResult result;
};

std::unique_ptr<Preview> preview(const std::string& sections, std::vector<std::string> extra) {
  auto p = std::make_unique<Preview>();
  p->file = p->dir.write("ds_config.json", "{\"train_batch_size\": 1, " + sections + "}").string();
  std::vector<std::string> args = {"lr-schedule", "--config", p->file};
  args.insert(args.end(), extra.begin(), extra.end());
  p->result = run_dscore(args);
  return p;
}

Csv csv_of(const std::string& sections, std::vector<std::string> extra) {
  extra.push_back("--csv");
  auto p = preview(sections, extra);
  EXPECT_EQ(p->result.exit_code, 0) << p->result.describe();
  EXPECT_EQ(p->result.err, "");
  return parse_csv(p->result.out);
}

const char* kAdam = R"("optimizer": {"type": "Adam", "params": {"lr": 0.0015}})";

TEST(CliLrSchedule, WarmupLrValuesAreWhatTrainingApplies) {
  Csv csv = csv_of(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupLR", "params":
      {"warmup_min_lr": 0.1, "warmup_max_lr": 0.2, "warmup_num_steps": 10}})",
                   {"--steps", "25"});
  ASSERT_EQ(csv.header, (std::vector<std::string>{"step", "lr"}));
  ASSERT_EQ(csv.rows.size(), 25u);
  for (size_t k = 1; k <= 25; ++k) {
    const double t = static_cast<double>(k) - 2;  // update k uses t = k - 2
    const double expected =
        t < 0 ? 0.1 : 0.1 + 0.1 * std::min(1.0, std::log(t + 1) / std::log(10.0));
    EXPECT_EQ(csv.rows[k - 1][0], static_cast<double>(k));
    EXPECT_NEAR(csv.rows[k - 1][1], expected, 1e-16) << "step " << k;
  }
  EXPECT_EQ(csv.rows[0][1], 0.1);            // the constructor's value
  EXPECT_EQ(csv.rows[1][1], 0.1);            // t = 0: the first TWO updates use the minimum
  EXPECT_NEAR(csv.rows[10][1], 0.2, 1e-16);  // step 11, t = 9 = N - 1: log warm-up done
}

TEST(CliLrSchedule, OneCycleShowsMomentum) {
  Csv csv = csv_of(std::string(kAdam) + R"(, "scheduler": {"type": "OneCycle", "params":
      {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 4}})",
                   {"--steps", "12"});
  ASSERT_EQ(csv.header, (std::vector<std::string>{"step", "lr", "beta1", "beta2"}));
  ASSERT_EQ(csv.rows.size(), 12u);
  EXPECT_EQ(csv.rows[0][1], 0.001);  // constructor: lr = min, betas = (min_mom, 0.99)
  EXPECT_EQ(csv.rows[0][2], 0.8);
  EXPECT_EQ(csv.rows[0][3], 0.99);
  EXPECT_NEAR(csv.rows[1][1], 0.001 + 0.009 * 0.25, 1e-17);  // t = 0: a quarter up
  EXPECT_NEAR(csv.rows[1][2], 0.9 - 0.1 * 0.25, 1e-15);
  EXPECT_NEAR(csv.rows[4][1], 0.01, 1e-17);  // t = 3: the peak
  EXPECT_NEAR(csv.rows[4][2], 0.8, 1e-15);
  for (const auto& row : csv.rows) EXPECT_EQ(row[3], 0.99);
}

TEST(CliLrSchedule, WarmupCosineUsesTheOptimizerLrAsPeak) {
  Csv csv = csv_of(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupCosineLR", "params":
      {"total_num_steps": 30, "warmup_num_steps": 5, "warmup_type": "linear"}})",
                   {"--steps", "40"});
  ASSERT_EQ(csv.rows.size(), 40u);
  EXPECT_EQ(csv.rows[0][1], 0.0);  // constructor value
  EXPECT_NEAR(csv.rows[6][1],
              0.0015 * (1 + std::cos(std::numbers::pi / 25)) / 2 * (1 - 1e-4) + 0.0015 * 1e-4,
              1e-18);
  EXPECT_NEAR(csv.rows[30][1], 0.0015 * 1e-4, 1e-18);  // t = 29 = T - 1: cos_min_ratio
  EXPECT_NEAR(csv.rows[39][1], 0.0015 * 1e-4, 1e-18);  // held after T (not periodic)
}

TEST(CliLrSchedule, WithoutASchedulerTheOptimizerLrIsConstant) {
  Csv csv = csv_of(kAdam, {"--steps", "5"});
  ASSERT_EQ(csv.header, (std::vector<std::string>{"step", "lr"}));
  ASSERT_EQ(csv.rows.size(), 5u);
  for (const auto& row : csv.rows) EXPECT_EQ(row[1], 0.0015);
}

TEST(CliLrSchedule, AutoTotalStepsFollowsSteps) {
  Csv csv = csv_of(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupDecayLR", "params":
      {"warmup_min_lr": 0.0, "warmup_max_lr": 0.1, "warmup_num_steps": 4, "warmup_type": "linear",
       "total_num_steps": "auto"}})",
                   {"--steps", "20"});
  ASSERT_EQ(csv.rows.size(), 20u);
  // T = 20 (from --steps); step 20 uses t = 18: 0.1 * (20 - 18) / (20 - 4).
  EXPECT_NEAR(csv.rows[19][1], 0.1 * 2.0 / 16.0, 1e-17);
}

// DeepSpeed 0.19's WarmupLR warms up to the optimizer's lr when warmup_max_lr
// is not given; "auto" (HF Trainer configs) means the optimizer's lr for both.
TEST(CliLrSchedule, WarmupMaxLrDefaultsAndAutoFollowTheOptimizer) {
  for (const char* params :
       {R"("type": "WarmupLR", "params": {"warmup_num_steps": 2})",
        R"("type": "WarmupLR", "params": {"warmup_num_steps": 2, "warmup_max_lr": "auto"})",
        R"("type": "WarmupDecayLR", "params": {"warmup_num_steps": 2, "warmup_max_lr": "auto",
           "total_num_steps": 100})"}) {
    SCOPED_TRACE(params);
    Csv csv = csv_of(std::string(kAdam) + R"(, "scheduler": {)" + params + "}", {"--steps", "4"});
    ASSERT_EQ(csv.rows.size(), 4u);
    EXPECT_EQ(csv.rows[0][1], 0.0);
    EXPECT_EQ(csv.rows[2][1], 0.0015);  // t = 1 = N - 1: log warm-up done
  }
}

TEST(CliLrSchedule, DefaultOutputIsATableAndAPlot) {
  auto p = preview(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupLR", "params":
      {"warmup_max_lr": 0.01, "warmup_num_steps": 8}}, "train_steps": 12)",
                   {});
  ASSERT_EQ(p->result.exit_code, 0) << p->result.describe();
  const std::string& out = p->result.out;
  EXPECT_NE(out.find("scheduler WarmupLR"), std::string::npos) << out;
  EXPECT_NE(out.find("12 steps"), std::string::npos) << out;
  std::vector<std::string> header = lines_starting_with(out, "    step");
  ASSERT_EQ(header.size(), 1u) << out;
  EXPECT_NE(header[0].find(" t "), std::string::npos);
  EXPECT_NE(header[0].find("lr"), std::string::npos);
  EXPECT_EQ(lines_starting_with(out, "      12 ").size(), 1u) << out;  // the last step's row
  EXPECT_NE(out.find("lr (group 0) by optimizer step"), std::string::npos) << out;
  EXPECT_NE(out.find("*"), std::string::npos);
}

// Errors: one "error: ..." line per problem on stderr, exit 2, as config check.
void expect_config_error(const std::string& sections, std::vector<std::string> extra,
                         const std::string& part) {
  auto p = preview(sections, extra);
  EXPECT_EQ(p->result.exit_code, 2) << p->result.describe();
  EXPECT_EQ(p->result.out, "");
  EXPECT_EQ(p->result.err.rfind("error: " + p->file, 0), 0u) << p->result.err;
  EXPECT_NE(p->result.err.find(part), std::string::npos) << p->result.err;
}

TEST(CliLrSchedule, ConfigErrorsExitTwo) {
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupLR", "params":
      {"warmup_max_lrr": 0.1}})",
                      {"--steps", "3"}, "scheduler.params.warmup_max_lrr");
  // DeepSpeed 0.19's ValueErrors for step sizes and warm-up lengths, refused at config time
  // with the key, the value and the valid range.
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupCosineLR", "params":
      {"total_num_steps": 10, "warmup_num_steps": 0}})",
                      {"--steps", "3"}, "scheduler.params.warmup_num_steps: must be >= 1, got 0");
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupLR", "params":
      {"warmup_num_steps": -5}})",
                      {"--steps", "3"}, "scheduler.params.warmup_num_steps: must be >= 1, got -5");
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "OneCycle", "params":
      {"cycle_min_lr": 0.1, "cycle_max_lr": 0.2, "cycle_second_step_size": -1}})",
                      {"--steps", "3"},
                      "scheduler.params.cycle_second_step_size: must be >= 0, got -1");
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "LRRangeTest", "params":
      {"lr_range_test_step_size": 0}})",
                      {"--steps", "3"},
                      "scheduler.params.lr_range_test_step_size: must be >= 1, got 0");
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupLR"})", {},
                      "train_steps");
  expect_config_error(R"("scheduler": {"type": "WarmupLR"})", {"--steps", "3"}, "optimizer");
  expect_config_error(std::string(kAdam) + R"(, "scheduler": {"type": "OneCycle", "params":
      {"cycle_min_lr": 0.1, "cycle_max_lr": 0.2, "cycle_first_step_size": 0}})",
                      {"--steps", "3"},
                      "scheduler.params.cycle_first_step_size: must be >= 1, got 0");
}

// The CSV prints each value as Python's repr() does (shortest round trip), so a
// schedule can be compared with DeepSpeed's text to the last digit. Expected
// rows: DeepSpeed 0.19.8's WarmupCosineLR on a torch Adam with lr 0.0015
// (/work/ds-venv/bin/python; the constructor value, then one step() per
// update, each printed with repr()). "cosine" is not a warm-up type: DeepSpeed
// and dscore warn and use "log".
TEST(CliLrSchedule, CsvMatchesDeepSpeedToTheLastDigit) {
  auto p = preview(std::string(kAdam) + R"(, "scheduler": {"type": "WarmupCosineLR", "params":
      {"total_num_steps": 10, "warmup_num_steps": 3, "warmup_type": "cosine"}})",
                   {"--steps", "12", "--csv"});
  ASSERT_EQ(p->result.exit_code, 0) << p->result.describe();
  EXPECT_NE(p->result.err.find("Using unknown warmup_type: cosine"), std::string::npos)
      << p->result.err;
  EXPECT_EQ(split_lines(p->result.out),
            (std::vector<std::string>{
                "step,lr", "1,0.0", "2,0.0", "3,0.000946394630357186", "4,0.0015",
                "5,0.0014257340782617217", "6,0.0012176455896589107", "7,0.000916949011397189",
                "8,0.000583200988602811", "9,0.0002825044103410893", "10,7.441592173827842e-05",
                "11,1.5000000000000002e-07", "12,1.5000000000000002e-07"}));
}

TEST(CliLrSchedule, UsageErrors) {
  ProcessResult r = run_dscore({"lr-schedule"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  r = run_dscore({"lr-schedule", "--config", "x.json", "--steps", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("--steps must be a positive number"), std::string::npos) << r.err;
  r = run_dscore({"lr-schedule", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("usage: dscore lr-schedule --config F [--steps N] [--csv]", 0), 0u)
      << r.out;
}

}  // namespace
}  // namespace dscore::testing
