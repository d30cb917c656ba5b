// `dscore run` training the llama model through the real executable: a
// tiny Llama (grouped-query attention, Llama 3 rope scaling, untied head)
// learns a repeating text at 1 rank, with activation checkpointing giving
// the same losses; and a tied one trains at 2 ranks (mpirun) under ZeRO
// stage 3, where every rank holds only its shards of the parameters.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

std::string llama_config(const fs::path& corpus, const std::string& model_extra,
                         const std::string& extra) {
  return R"({"train_batch_size": 8, "train_steps": 40, "seed": 5, "steps_per_print": 1000,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
    "model": {"type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 88,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 64, "block_size": 24, "rope_theta": 10000.0)" +
         model_extra + R"(},
    "data": {"type": "text", "path": ")" +
         corpus.string() + "\"}" + extra + "}";
}

// The loss of each "step k/n | loss X" line.
std::vector<double> step_losses(const std::string& out) {
  std::vector<double> losses;
  for (const std::string& line : lines_starting_with(out, "step ")) {
    const size_t at = line.find("| loss ");
    if (at != std::string::npos) losses.push_back(std::stod(line.substr(at + 7)));
  }
  return losses;
}

class LlamaRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 1500; ++i) text += "the quick brown fox ";
    corpus_ = dir_.write("corpus.txt", text);
  }
  TempDir dir_{"dscore_cli_llama"};
  fs::path corpus_;
};

TEST_F(LlamaRun, OneRankLearnsARepeatingTextAndCheckpointingGivesTheSameLosses) {
  const std::string model = R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})";
  ProcessResult plain = run_dscore(
      {"run", "--config", dir_.write("plain.json", llama_config(corpus_, model, "")).string()});
  ASSERT_EQ(plain.exit_code, 0) << plain.describe();
  const std::vector<double> losses = step_losses(plain.out);
  ASSERT_GE(losses.size(), 10u) << plain.out;
  EXPECT_GT(losses.front(), 5.0);  // about ln(256) at the start
  EXPECT_LT(losses.back(), 0.25 * losses.front()) << plain.out;

  ProcessResult checkpointed = run_dscore(
      {"run", "--config",
       dir_.write("checkpointed.json",
                  llama_config(corpus_, model,
                               R"(, "activation_checkpointing": {"number_checkpoints": 1})"))
           .string()});
  ASSERT_EQ(checkpointed.exit_code, 0) << checkpointed.describe();
  EXPECT_EQ(step_losses(checkpointed.out), losses);
}

TEST_F(LlamaRun, TwoRanksUnderZeroStage3Train) {
  ProcessOptions options;
  options.env = mpi_test_env();
  ProcessResult r = run_dscore(
      {"run", "-n", "2", "--config",
       dir_.write("stage3.json", llama_config(corpus_, R"(, "tie_word_embeddings": true)",
                                              R"(, "zero_optimization": {"stage": 3})"))
           .string()},
      options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("ZeRO stage 3, 2 rank(s)"), std::string::npos) << r.err;
  const std::vector<double> losses = step_losses(r.out);
  ASSERT_GE(losses.size(), 10u) << r.out;
  EXPECT_LT(losses.back(), 0.25 * losses.front()) << r.out;
}

// layer_flops through DeepSpeed's flops profiler: micro-batch 8 x 24
// positions (N = 192), C = Q = 32, KV = 16, I = 88, V = 256. A block:
// 2 N (2 C Q + 2 C KV + 3 C I) + 4 N T Q = 4,423,680 + 589,824 flops =
// 2.51 MMACs; the final layer (untied head): 4 N C + 2 N C V = 1.59 MMACs.
TEST_F(LlamaRun, TheFlopsProfilerReportsTheModelsLayerFlops) {
  ProcessResult r = run_dscore(
      {"run", "--config",
       dir_.write("flops.json",
                  llama_config(corpus_, "",
                               R"(, "flops_profiler": {"enabled": true, "profile_step": 1})"))
           .string(),
       "--steps", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string all = r.out + r.err;
  EXPECT_NE(all.find("(model.layers.0): 11.58 K = "), std::string::npos) << all;
  EXPECT_NE(all.find("2.51 MMACs = "), std::string::npos) << all;
  EXPECT_NE(all.find("(model.norm): "), std::string::npos) << all;
  EXPECT_NE(all.find("1.59 MMACs = "), std::string::npos) << all;
}

TEST_F(LlamaRun, AnUnsupportedSettingIsNamed) {
  ProcessResult r = run_dscore(
      {"run", "--config",
       dir_.write("yarn.json", llama_config(corpus_, R"(, "rope_scaling": {"rope_type": "yarn",
           "factor": 4.0})",
                                            ""))
           .string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rope_type \"yarn\" is not supported"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace dscore::testing
