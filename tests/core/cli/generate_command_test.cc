// `dscore generate` through the real executable: a tiny gpt trained by
// `dscore run` on a repeating text, saved, then continued greedily from a
// prompt (the cycle it learned); sampling repeats with the same seed; the
// KV cache gives the tokens forward passes give, past the context too; a
// prompts file of ragged prompts generated together gives each prompt's
// tokens alone; and the usage and data errors a user can make.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

// Trains a tiny byte-level gpt on "abcdefg" repeated and saves it in dir/ckpt.
class GenerateCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("dscore_cli_generate");
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "abcdefg ";
    dir_->write("corpus.txt", text);
    const std::string config = R"({
      "train_batch_size": 8, "train_steps": 60, "seed": 3,
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
      "model": {"type": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 256},
      "data": {"type": "text", "path": ")" +
                               (dir_->path() / "corpus.txt").string() + R"("},
      "checkpoint_dir": ")" + (dir_->path() / "ckpt").string() +
                               R"(", "save_interval": 60})";
    const fs::path file = dir_->write("ds_config.json", config);
    trained_ = new ProcessResult(run_dscore({"run", "--config", file.string()}));
  }
  static void TearDownTestSuite() {
    delete trained_;
    delete dir_;
  }
  static std::string checkpoint() { return (dir_->path() / "ckpt").string(); }
  static TempDir* dir_;
  static ProcessResult* trained_;
};
TempDir* GenerateCommand::dir_ = nullptr;
ProcessResult* GenerateCommand::trained_ = nullptr;

TEST_F(GenerateCommand, GreedyContinuationFollowsTheLearnedCycle) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  ProcessResult r = run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt", "abcd",
                                "--temperature", "0", "--max-new-tokens", "12"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "abcdefg abcdefg \n") << r.describe();
}

TEST_F(GenerateCommand, SamplingIsRepeatableWithASeedAndTopKOneIsGreedy) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  auto sample = [&](const std::string& seed, const std::string& top_k) {
    return run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt", "ab", "--temperature",
                       "1.5", "--top-k", top_k, "--seed", seed, "--max-new-tokens", "30"});
  };
  ProcessResult a = sample("5", "0"), b = sample("5", "0"), greedy_k1 = sample("9", "1");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.size(), 2u + 30u + 1u);
  ProcessResult greedy = run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt", "ab",
                                     "--temperature", "0", "--max-new-tokens", "30"});
  EXPECT_EQ(greedy_k1.out, greedy.out);
}

TEST_F(GenerateCommand, TokenIdsInAndOut) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  // 97 98 99 = "abc": greedy continues with d e f.
  ProcessResult r = run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt-tokens",
                                "97,98,99", "--temperature", "0", "--max-new-tokens", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "97,98,99,100,101,102\n");
}

TEST_F(GenerateCommand, UsageErrorsExitTwo) {
  EXPECT_EQ(run_dscore({"generate", "--checkpoint", checkpoint()}).exit_code, 2);  // no prompt
  EXPECT_EQ(run_dscore(
                {"generate", "--checkpoint", checkpoint(), "--prompt", "a", "--prompt-tokens", "1"})
                .exit_code,
            2);
  EXPECT_EQ(
      run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt-tokens", "1,x"}).exit_code,
      2);
  ProcessResult big =
      run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt-tokens", "300"});
  EXPECT_EQ(big.exit_code, 2);
  EXPECT_NE(big.err.find("vocab_size 256"), std::string::npos) << big.describe();
}

// Past block_size (16) tokens both slide over the last 16.
TEST_F(GenerateCommand, TheKvCacheGivesTheTokensOfForwardPasses) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  for (const char* temperature : {"0", "1.2"}) {
    auto generate = [&](bool cache) {
      std::vector<std::string> args = {
          "generate", "--checkpoint",     checkpoint(), "--prompt",
          "cdefg ab", "--temperature",    temperature,  "--top-p",
          "0.95",     "--max-new-tokens", "40",         "--repetition-penalty",
          "1.1"};
      if (!cache) args.push_back("--no-kv-cache");
      return run_dscore(args);
    };
    ProcessResult cached = generate(true), uncached = generate(false);
    ASSERT_EQ(cached.exit_code, 0) << cached.describe();
    ASSERT_EQ(uncached.exit_code, 0) << uncached.describe();
    EXPECT_EQ(cached.out, uncached.out);
    EXPECT_EQ(cached.out.size(), 8u + 40u + 1u) << cached.out;
    EXPECT_EQ(cached.err.find("without a KV cache"), std::string::npos) << cached.err;
  }
}

TEST_F(GenerateCommand, APromptsFileOfRaggedPromptsGivesEachPromptsTokensAlone) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  const fs::path prompts =
      dir_->write("prompts.jsonl",
                  "{\"prompt\": \"abcd\"}\n"
                  "{\"prompt_tokens\": [101, 102, 103, 32, 97, 98, 99, 100, 101, 102]}\n"
                  "\n"
                  "{\"prompt\": \"g\", \"max_new_tokens\": 3}\n"
                  "{\"prompt\": \"bcdefg abcdefg abcdefg\", \"temperature\": 1.0, \"seed\": 9}\n");
  ProcessResult r =
      run_dscore({"generate", "--checkpoint", checkpoint(), "--prompts-file", prompts.string(),
                  "--temperature", "0", "--max-new-tokens", "12", "--batch-size", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // Line by line as each finishes: the 3-token one first.
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')),
            R"({"index":2,"tokens":[32,97,98],"text":" ab","finish_reason":"length"})");
  EXPECT_NE(r.out.find(R"({"index":0,"tokens":[101,102,103,32,97,98,99,100,101,102,103,32],)"
                       R"("text":"efg abcdefg ","finish_reason":"length"})"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(R"({"index":1,"tokens":[103,32,97,98,99,100,101,102,103,32,97,98],)"
                       R"("finish_reason":"length"})"),
            std::string::npos)
      << r.out;
  // The sampled one as it comes alone (its own seed), with and without the cache.
  for (bool cache : {true, false}) {
    const fs::path alone =
        dir_->write("alone.jsonl",
                    "{\"prompt\": \"bcdefg abcdefg abcdefg\", \"temperature\": 1.0, "
                    "\"seed\": 9}\n");
    std::vector<std::string> args = {
        "generate",     "--checkpoint",     checkpoint(), "--prompts-file",
        alone.string(), "--max-new-tokens", "12"};
    if (!cache) args.push_back("--no-kv-cache");
    ProcessResult one = run_dscore(args);
    ASSERT_EQ(one.exit_code, 0) << one.describe();
    EXPECT_NE(r.out.find(one.out.substr(one.out.find(",\"tokens\""))), std::string::npos)
        << r.out << "\nalone: " << one.out;
  }
  const fs::path bad =
      dir_->write("bad.jsonl", "{\"prompt\": \"a\"}\n{\"prompt_tokens\": [1, \"x\"]}\n");
  ProcessResult refused =
      run_dscore({"generate", "--checkpoint", checkpoint(), "--prompts-file", bad.string()});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("bad.jsonl line 2: \"prompt_tokens\" must hold integer ids"),
            std::string::npos)
      << refused.describe();
}

// ZeRO-Inference: stage 3 with the weights in host memory, or on NVMe
// (16-bit models: an fp32 model's weights are its master weights), each
// layer gathered as it runs: the same tokens as the whole model in memory.
TEST_F(GenerateCommand, ZeroInferenceGivesTheTokensOfTheWholeModel) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  const fs::path nvme = dir_->path() / "nvme";
  fs::create_directories(nvme);
  auto generate = [&](const std::string& ckpt, const std::string& offload) {
    return run_dscore({"generate", "--checkpoint", ckpt, "--prompt", "bcd", "--temperature", "0",
                       "--max-new-tokens", "20", "--offload-param", offload, "--nvme-path",
                       nvme.string()});
  };
  ProcessResult whole = generate(checkpoint(), "none"), host = generate(checkpoint(), "cpu");
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();
  ASSERT_EQ(host.exit_code, 0) << host.describe();
  EXPECT_EQ(host.out, whole.out);
  ProcessResult fp32_nvme = generate(checkpoint(), "nvme");
  EXPECT_EQ(fp32_nvme.exit_code, 1);
  EXPECT_NE(fp32_nvme.err.find("parameters on NVMe need a 16-bit model"), std::string::npos)
      << fp32_nvme.describe();
  EXPECT_EQ(generate(checkpoint(), "gpu").exit_code, 1);
  // A bf16 model on NVMe.
  const std::string config = R"({
      "train_batch_size": 8, "train_steps": 20, "seed": 3, "bf16": {"enabled": true},
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
      "model": {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 256},
      "data": {"type": "text", "path": ")" +
                             (dir_->path() / "corpus.txt").string() + R"("},
      "checkpoint_dir": ")" + (dir_->path() / "bf16").string() +
                             R"(", "save_interval": 20})";
  ProcessResult trained =
      run_dscore({"run", "--config", dir_->write("bf16.json", config).string()});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  const std::string bf16 = (dir_->path() / "bf16").string();
  ProcessResult in_memory = generate(bf16, "none"), on_disk = generate(bf16, "nvme");
  ASSERT_EQ(in_memory.exit_code, 0) << in_memory.describe();
  ASSERT_EQ(on_disk.exit_code, 0) << on_disk.describe();
  EXPECT_EQ(on_disk.out, in_memory.out);
}

// -n 2: two ranks under mpirun split the model (tensor parallelism) and
// decode in step, the first printing: the tokens of one rank, greedy and
// sampled, one prompt and a prompts file.
TEST_F(GenerateCommand, TwoTensorParallelRanksGiveTheTokensOfOne) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  const fs::path prompts = dir_->write(
      "tp_prompts.jsonl", "{\"prompt\": \"abc\"}\n{\"prompt\": \"fg a\", \"temperature\": 1.0}\n");
  for (const char* temperature : {"0", "1.3"}) {
    auto generate = [&](const char* ranks) {
      return run_dscore({"generate", "--checkpoint", checkpoint(), "--prompt", "cdef",
                         "--temperature", temperature, "--max-new-tokens", "24", "-n", ranks});
    };
    ProcessResult one = generate("1"), two = generate("2");
    ASSERT_EQ(one.exit_code, 0) << one.describe();
    ASSERT_EQ(two.exit_code, 0) << two.describe();
    EXPECT_EQ(two.out, one.out);
    EXPECT_NE(two.err.find("KV cache"), std::string::npos) << two.err;
  }
  auto batch = [&](const char* ranks) {
    return run_dscore({"generate", "--checkpoint", checkpoint(), "--prompts-file", prompts.string(),
                       "--max-new-tokens", "10", "--temperature", "0", "-n", ranks});
  };
  ProcessResult one = batch("1"), two = batch("2");
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  EXPECT_EQ(two.out, one.out);
}

TEST_F(GenerateCommand, AMissingCheckpointSaysWhere) {
  ProcessResult r = run_dscore(
      {"generate", "--checkpoint", (dir_->path() / "nowhere").string(), "--prompt", "a"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nowhere"), std::string::npos) << r.describe();
}

TEST_F(GenerateCommand, RunWithAMissingDataFileNamesIt) {
  const std::string config = R"({"train_batch_size": 2, "train_steps": 1,
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
      "model": {"type": "gpt", "n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 4, "vocab_size": 256},
      "data": {"type": "text", "path": "/nonexistent/corpus.txt"}})";
  const fs::path file = dir_->write("missing_data.json", config);
  ProcessResult r = run_dscore({"run", "--config", file.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/corpus.txt"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace dscore::testing
