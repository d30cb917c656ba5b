// `dscore config check` (core/cli/config_command.cc) through the real
// executable: a valid config prints the resolved JSON on stdout; every bad
// input of issue 2 is exit 2 with one "error: <file>:<line>:<col>: <path>:
// <message>" line per problem; the batch triad uses DeepSpeed's exact
// messages (docs/deepspeed-reference.md#batch-size-triad, worked examples at W = 2).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/config/json.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

// The config of a case, written to <tmp>/ds_config.json; errors name that path.
struct CheckRun {
  TempDir dir{"dscore_cli_config"};
  std::string file;
  ProcessResult result;
};

std::unique_ptr<CheckRun> check(const std::string& config_text, int world_size = 1) {
  auto run = std::make_unique<CheckRun>();
  run->file = run->dir.write("ds_config.json", config_text).string();
  run->result =
      run_dscore({"config", "check", run->file, "--world-size", std::to_string(world_size)});
  return run;
}

// Runs the check and expects exactly one stderr line, exit 2, nothing on stdout.
std::string only_error_line(const std::string& config_text, int world_size = 1) {
  auto run = check(config_text, world_size);
  const ProcessResult& r = run->result;
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.out, "") << "a failed check prints no config";
  std::vector<std::string> lines = split_lines(r.err);
  EXPECT_EQ(lines.size(), 1u) << r.err;
  if (lines.empty()) return "";
  // Callers compare against "error: F:..." with F standing for the file.
  std::string line = lines[0];
  const std::string file_prefix = "error: " + run->file;
  EXPECT_EQ(line.rfind(file_prefix, 0), 0u) << line;
  if (line.rfind(file_prefix, 0) == 0) line = "error: F" + line.substr(file_prefix.size());
  return line;
}

json::Value parse_stdout(const ProcessResult& r) {
  auto parsed = json::parse(r.out, "stdout");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << r.out;
  return parsed.ok() ? *parsed : json::Value();
}

TEST(CliConfigCheck, QuickstartIsValidAndPrintsTheResolvedConfig) {
  const std::string quickstart = std::string(DSCORE_SOURCE_DIR) + "/configs/quickstart.json";
  ProcessResult r = run_dscore({"config", "check", quickstart, "--world-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err, "");
  json::Value resolved = parse_stdout(r);
  ASSERT_TRUE(resolved.is_object());
  // Derived by the batch triad (train 32, micro 16, W 2) and filled defaults
  // the file does not mention (docs/deepspeed-reference.md#zero-optimization-keys).
  ASSERT_NE(resolved.find("gradient_accumulation_steps"), nullptr);
  EXPECT_EQ(resolved.find("gradient_accumulation_steps")->as_int(), 1);
  const json::Value* zero = resolved.find("zero_optimization");
  ASSERT_NE(zero, nullptr);
  ASSERT_NE(zero->find("reduce_bucket_size"), nullptr) << r.out;
  EXPECT_EQ(zero->find("reduce_bucket_size")->as_int(), 500000000);
  ASSERT_NE(zero->find("allgather_bucket_size"), nullptr);
  EXPECT_EQ(zero->find("allgather_bucket_size")->as_int(), 500000000);
  // The plugin sections come back validated, with the plugin's defaults.
  const json::Value* optimizer = resolved.find("optimizer");
  ASSERT_NE(optimizer, nullptr);
  EXPECT_EQ(optimizer->find("type")->as_string(), "AdamW");
  EXPECT_EQ(optimizer->find("params")->find("lr")->as_number(), 0.003);
  const json::Value* model = resolved.find("model");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->find("type")->as_string(), "gpt");
}

TEST(CliConfigCheck, WorldSizeDrivesTheBatchTriad) {
  // {train 32, micro 4} at W = 2 -> gas = (32 // 4) // 2 = 4
  // (docs/deepspeed-reference.md#batch-size-triad).
  auto run = check("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2);
  ASSERT_EQ(run->result.exit_code, 0) << run->result.describe();
  json::Value resolved = parse_stdout(run->result);
  ASSERT_NE(resolved.find("gradient_accumulation_steps"), nullptr);
  EXPECT_EQ(resolved.find("gradient_accumulation_steps")->as_int(), 4);

  // {micro 4} at W = 2 -> train 8, gas 1.
  run = check("{\"train_micro_batch_size_per_gpu\": 4}", 2);
  ASSERT_EQ(run->result.exit_code, 0) << run->result.describe();
  resolved = parse_stdout(run->result);
  EXPECT_EQ(resolved.find("train_batch_size")->as_int(), 8);
  EXPECT_EQ(resolved.find("gradient_accumulation_steps")->as_int(), 1);
}

TEST(CliConfigCheck, WorldSizeBelowOneIsAUsageError) {
  auto run = check("{\"train_batch_size\": 32}", 0);
  EXPECT_EQ(run->result.exit_code, 2) << run->result.describe();
  EXPECT_EQ(run->result.err, "dscore: --world-size must be at least 1\n");
}

TEST(CliConfigCheck, MissingFileNamesIt) {
  ProcessResult r = run_dscore({"config", "check", "/nonexistent/ds_config.json"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.err,
            "error: /nonexistent/ds_config.json: cannot read config file: No such file or "
            "directory\n");
}

TEST(CliConfigCheck, MalformedJsonPointsAtLineAndColumn) {
  // The missing comma after the zero_optimization object is found where the
  // next key starts: line 4, column 3. (A trailing comma is accepted, as
  // DeepSpeed's hjson does.)
  std::string line = only_error_line(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"zero_optimization\": {\"stage\": 0,}\n"
      "  \"steps_per_print\": 10\n"
      "}\n");
  EXPECT_EQ(line.rfind("error: F:4:3: ", 0), 0u) << line;
  EXPECT_NE(line.find("comma"), std::string::npos) << line;
}

TEST(CliConfigCheck, UnknownTopLevelKeySuggestsTheRealOne) {
  EXPECT_EQ(only_error_line("{\n"
                            "  \"train_batch_size\": 32,\n"
                            "  \"zero_optimisation\": {\"stage\": 0}\n"
                            "}\n"),
            "error: F:3:3: zero_optimisation: unknown key \"zero_optimisation\"; did you mean "
            "\"zero_optimization\"?");
}

TEST(CliConfigCheck, UnknownNestedKeyNamesItsFullPath) {
  EXPECT_EQ(only_error_line("{\n"
                            "  \"train_batch_size\": 32,\n"
                            "  \"zero_optimization\": {\"stagee\": 2}\n"
                            "}\n"),
            "error: F:3:25: zero_optimization.stagee: unknown key \"stagee\"; did you mean "
            "\"stage\"?");
}

TEST(CliConfigCheck, WrongTypeNamesExpectedAndGiven) {
  EXPECT_EQ(only_error_line("{\n"
                            "  \"train_batch_size\": \"32\"\n"
                            "}\n"),
            "error: F:2:23: train_batch_size: expected an int, got string \"32\"");
}

TEST(CliConfigCheck, OutOfRangeStage) {
  EXPECT_EQ(only_error_line("{\n"
                            "  \"train_batch_size\": 32,\n"
                            "  \"zero_optimization\": {\"stage\": 4}\n"
                            "}\n"),
            "error: F:3:34: zero_optimization.stage: must be between 0 and 3, got 4");
}

TEST(CliConfigCheck, AutoWhereNotAllowedIsRejectedSayingWhatDeepSpeedWouldDo) {
  std::string line = only_error_line(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"zero_optimization\": {\"stage\": \"auto\"}\n"
      "}\n");
  EXPECT_EQ(line.rfind("error: F:3:34: zero_optimization.stage: \"auto\" is not accepted here", 0),
            0u)
      << line;
  EXPECT_NE(line.find("stage 0"), std::string::npos) << line;
}

TEST(CliConfigCheck, AutoWhereAllowedIsResolvedAndANoteSaysSo) {
  auto run = check(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"gradient_clipping\": \"auto\"\n"
      "}\n");
  const ProcessResult& r = run->result;
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<std::string> notes = lines_starting_with(r.err, "note: ");
  ASSERT_EQ(notes.size(), 1u) << r.err;
  EXPECT_EQ(notes[0].rfind("note: gradient_clipping: \"auto\" -> 1.0", 0), 0u) << notes[0];
  EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
  json::Value resolved = parse_stdout(r);
  ASSERT_NE(resolved.find("gradient_clipping"), nullptr);
  EXPECT_EQ(resolved.find("gradient_clipping")->as_number(), 1.0);
}

// The batch triad at --world-size 2: docs/deepspeed-reference.md#batch-size-triad's worked examples
// and DeepSpeed's assertion texts, verbatim.
struct TriadCase {
  const char* name;
  const char* config;
  const char* error;
};

class CliBatchTriad : public ::testing::TestWithParam<TriadCase> {};

TEST_P(CliBatchTriad, FailsWithDeepSpeedsMessage) {
  EXPECT_EQ(only_error_line(GetParam().config, 2), GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    DeepSpeedWorkedExamples, CliBatchTriad,
    ::testing::Values(
        TriadCase{"Train30Micro4",
                  "{\n  \"train_batch_size\": 30,\n  \"train_micro_batch_size_per_gpu\": 4\n}\n",
                  "error: F:2:23: train_batch_size: Check batch related parameters. "
                  "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * "
                  "world_size 30 != 4 * 3 * 2"},
        TriadCase{"Train33Gas2",
                  "{\n  \"train_batch_size\": 33,\n  \"gradient_accumulation_steps\": 2\n}\n",
                  "error: F:2:23: train_batch_size: Check batch related parameters. "
                  "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * "
                  "world_size 33 != 8 * 2 * 2"},
        TriadCase{"Train0",
                  "{\n  \"train_batch_size\": 0,\n  \"train_micro_batch_size_per_gpu\": 4\n}\n",
                  "error: F:2:23: train_batch_size: Train batch size: 0 has to be greater than 0"},
        TriadCase{"Train1", "{\n  \"train_batch_size\": 1\n}\n",
                  "error: F:2:23: train_micro_batch_size_per_gpu: Micro batch size per gpu: 0 has "
                  "to be greater than 0 (train_micro_batch_size_per_gpu derived as train 1 // "
                  "world size 2)"},
        TriadCase{"Train33Micro17",
                  "{\n  \"train_batch_size\": 33,\n  \"train_micro_batch_size_per_gpu\": 17\n}\n",
                  "error: F:2:23: gradient_accumulation_steps: Gradient accumulation steps: 0 has "
                  "to be greater than 0 (gradient_accumulation_steps derived as (train 33 // micro "
                  "17) // world size 2)"},
        TriadCase{"OnlyGas", "{\n  \"gradient_accumulation_steps\": 2\n}\n",
                  "error: F:1:1: Either train_batch_size or train_micro_batch_size_per_gpu needs "
                  "to be provided"}),
    [](const ::testing::TestParamInfo<TriadCase>& info) { return std::string(info.param.name); });

TEST(CliConfigCheck, DuplicateKeyNamesBothPlaces) {
  EXPECT_EQ(only_error_line("{\n"
                            "  \"train_batch_size\": 32,\n"
                            "  \"train_batch_size\": 16\n"
                            "}\n"),
            "error: F:3:3: duplicate key \"train_batch_size\" (first at 2:3)");
}

TEST(CliConfigCheck, DeprecatedKeyWithItsReplacementIsDeepSpeedsError) {
  EXPECT_EQ(
      only_error_line("{\n"
                      "  \"train_batch_size\": 32,\n"
                      "  \"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true,\n"
                      "                        \"offload_optimizer\": {\"device\": \"cpu\"}}\n"
                      "}\n"),
      "error: F:3:37: zero_optimization.cpu_offload: Cannot provide deprecated parameter "
      "'cpu_offload' and replacing parameter 'offload_optimizer' together");
}

TEST(CliConfigCheck, UnknownOptimizerParamIsCheckedAgainstThePluginsSchema) {
  EXPECT_EQ(only_error_line("{\n"
                            "  \"train_batch_size\": 32,\n"
                            "  \"optimizer\": {\"type\": \"adam\", \"params\": {\"lrr\": 0.1}}\n"
                            "}\n"),
            "error: F:3:44: optimizer.params.lrr: unknown key \"lrr\"; did you mean \"lr\"?");
}

TEST(CliConfigCheck, WrongOptimizerParamTypeAndDeepSpeedsMaxGradNormError) {
  EXPECT_EQ(
      only_error_line("{\n"
                      "  \"train_batch_size\": 32,\n"
                      "  \"optimizer\": {\"type\": \"adam\", \"params\": {\"lr\": \"fast\"}}\n"
                      "}\n"),
      "error: F:3:50: optimizer.params.lr: expected a number, got string \"fast\"");
  std::string line = only_error_line(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"optimizer\": {\"type\": \"adam\", \"params\": {\"lr\": 0.1, \"max_grad_norm\": 1.0}}\n"
      "}\n");
  EXPECT_EQ(line.rfind("error: F:3:55: optimizer.params.max_grad_norm: 'max_grad_norm' is not "
                       "supported as an optimizer parameter, please switch to using the deepspeed "
                       "parameter 'gradient_clipping'",
                       0),
            0u)
      << line;
}

TEST(CliConfigCheck, UnknownOptimizerTypeSuggestsAndListsWhatExists) {
  std::string line = only_error_line(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"optimizer\": {\"type\": \"adma\", \"params\": {\"lr\": 0.1}}\n"
      "}\n");
  EXPECT_EQ(
      line.rfind("error: F:3:16: optimizer.type: no optimizer plugin named 'adma'; did you "
                 "mean \"adam\"?; available: adagrad, adam, adamw, lamb, lion, muon, onebitadam, "
                 "onebitlamb, sgd, zerooneadam. "
                 "Searched: ",
                 0),
      0u)
      << line;
  EXPECT_NE(line.find(DSCORE_BUILD_PLUGIN_DIR), std::string::npos) << line;
  EXPECT_NE(line.find("DSCORE_PLUGIN_PATH"), std::string::npos) << line;
}

// comm.backend names a plugin like optimizer.type does: a typo is a config
// error at the value, with a suggestion from the comm plugins found, not a
// failure when the job starts.
TEST(CliConfigCheck, UnknownCommBackendPointsAtTheValueAndSuggests) {
  if (!std::filesystem::exists(std::string(DSCORE_BUILD_PLUGIN_DIR) + "/libdscore_comm_mpi.so"))
    GTEST_SKIP() << "this build has no mpi comm plugin to suggest";
  // nccl is listed where this build has it (CUDA and NCCL found).
  const bool nccl =
      std::filesystem::exists(std::string(DSCORE_BUILD_PLUGIN_DIR) + "/libdscore_comm_nccl.so");
  std::string line = only_error_line(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"comm\": {\"backend\": \"mpii\"}\n"
      "}\n");
  EXPECT_EQ(line.rfind(std::string("error: F:3:23: comm.backend: no comm plugin named 'mpii'; did "
                                   "you mean \"mpi\"?; available: local, loopback, mpi") +
                           (nccl ? ", nccl" : "") + ". Searched: ",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find(DSCORE_BUILD_PLUGIN_DIR), std::string::npos) << line;
}

TEST(CliConfigCheck, CommBackendAutoAndRealNamesPass) {
  for (const char* backend : {"auto", "local", "LOCAL"}) {
    auto run = check(std::string("{\"train_batch_size\": 32, \"comm\": {\"backend\": \"") +
                     backend + "\"}}");
    EXPECT_EQ(run->result.exit_code, 0) << backend << ": " << run->result.describe();
    EXPECT_EQ(parse_stdout(run->result).find("comm")->find("backend")->as_string(), backend);
  }
}

TEST(CliConfigCheck, EveryErrorIsReportedOnItsOwnLine) {
  auto run = check(
      "{\n"
      "  \"train_batch_size\": 32,\n"
      "  \"zero_optimisation\": {\"stage\": 0},\n"
      "  \"fp16\": {\"enabled\": \"yes\"}\n"
      "}\n");
  const ProcessResult& r = run->result;
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 2u) << r.err;
  EXPECT_EQ(lines[0], "error: " + run->file +
                          ":3:3: zero_optimisation: unknown key \"zero_optimisation\"; did you "
                          "mean \"zero_optimization\"?");
  EXPECT_EQ(lines[1],
            "error: " + run->file +
                ":4:23: fp16.enabled: expected a bool (true or false), got string \"yes\"");
}

TEST(CliConfigReference, PrintsEveryTopLevelKey) {
  ProcessResult r = run_dscore({"config", "reference"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* key : {"train_batch_size", "zero_optimization", "reduce_bucket_size",
                          "gradient_clipping", "csv_monitor", "train_steps"})
    EXPECT_NE(r.out.find(key), std::string::npos) << key;
}

}  // namespace
}  // namespace dscore::testing

namespace dscore::testing {
namespace {

// A DeepSpeed feature dscore does not implement is an error naming the way
// out; --allow-unsupported turns it (and only it) into a note.
TEST(CliConfigCheck, AllowUnsupportedTurnsUnsupportedFeaturesIntoNotes) {
  const std::string text = R"({"train_batch_size": 1, "data_efficiency": {"enabled": true}})";
  const std::string line = only_error_line(text);
  EXPECT_EQ(line.rfind("error: F:1:25: data_efficiency: not implemented by dscore: ", 0), 0u)
      << line;
  EXPECT_NE(line.find("--allow-unsupported"), std::string::npos) << line;

  TempDir dir{"dscore_cli_config"};
  const std::string file = dir.write("ds_config.json", text).string();
  ProcessResult r = run_dscore({"config", "check", file, "--allow-unsupported"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("note: data_efficiency: warning: not implemented by dscore: "),
            std::string::npos)
      << r.err;

  const std::string typo =
      dir.write("typo.json", R"({"train_batch_size": 1, "autotunin": {}})").string();
  EXPECT_EQ(run_dscore({"config", "check", typo, "--allow-unsupported"}).exit_code, 2);
}

}  // namespace
}  // namespace dscore::testing
