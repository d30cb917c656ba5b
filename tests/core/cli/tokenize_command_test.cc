// `dscore tokenize` and `dscore generate --tokenizer` through the real
// executable, with the hand-made byte-level BPE of
// tests/core/tokenizer/tiny_tokenizer.h: text files become llm.c shards
// that `dscore run` trains a tiny gpt on; generate then encodes a text
// prompt, prints the decoded continuation and stops at <|endoftext|>. A
// vocabulary past 65536 ids gives uint32 shards that run reads too.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/core/cli/process.h"
#include "tests/core/tokenizer/tiny_tokenizer.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

std::string gpt_config(const fs::path& dir, const std::string& data_glob, int vocab, int steps,
                       const std::string& extra) {
  return R"({"train_batch_size": 8, "train_steps": )" + std::to_string(steps) +
         R"(, "seed": 3, "steps_per_print": 1000,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
    "model": {"type": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16,
              "vocab_size": )" +
         std::to_string(vocab) + R"(},
    "data": {"type": "tokens", "path": ")" +
         (dir / data_glob).string() + "\"}" + extra + "}";
}

// 100 documents "hello world hello world", tokenized with <|endoftext|>
// (the tokenizer_config.json eos) before each, and a gpt trained on them.
class TokenizeCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("dscore_cli_tokenize");
    fs::create_directories(tokenizer_dir());
    TinyTokenizer{}.write(tokenizer_dir());
    dir_->write("tok/tokenizer_config.json", R"({"eos_token": "<|endoftext|>"})");
    std::vector<std::string> args = {"tokenize",
                                     "--tokenizer",
                                     tokenizer_dir(),
                                     "--out",
                                     (dir_->path() / "shards" / "docs").string(),
                                     "--shard-tokens",
                                     "600"};
    fs::create_directories(dir_->path() / "shards");
    for (int i = 0; i < 100; ++i)
      args.push_back(
          dir_->write("doc" + std::to_string(i) + ".txt", "hello world hello world").string());
    tokenized_ = new ProcessResult(run_dscore(args));
    const fs::path config = dir_->write(
        "ds_config.json", gpt_config(dir_->path(), "shards/docs_*.bin", kTinyVocabSize, 150,
                                     ", \"checkpoint_dir\": \"" + (dir_->path() / "ckpt").string() +
                                         "\", \"save_interval\": 150"));
    trained_ = new ProcessResult(run_dscore({"run", "--config", config.string()}));
  }
  static void TearDownTestSuite() {
    delete trained_;
    delete tokenized_;
    delete dir_;
  }
  static std::string tokenizer_dir() { return (dir_->path() / "tok").string(); }
  static TempDir* dir_;
  static ProcessResult* tokenized_;
  static ProcessResult* trained_;
};
TempDir* TokenizeCommand::dir_ = nullptr;
ProcessResult* TokenizeCommand::tokenized_ = nullptr;
ProcessResult* TokenizeCommand::trained_ = nullptr;

TEST_F(TokenizeCommand, WritesUint16ShardsWithTheSeparatorBeforeEachDocument) {
  ASSERT_EQ(tokenized_->exit_code, 0) << tokenized_->describe();
  // 100 x (<|endoftext|> + 13 tokens) = 1400 tokens in shards of 600.
  EXPECT_NE(tokenized_->out.find("wrote 1400 tokens (uint16, vocab 266, separator 263) to 3 "
                                 "shard(s)"),
            std::string::npos)
      << tokenized_->out;
  EXPECT_TRUE(fs::exists(dir_->path() / "shards" / "docs_000002.bin"));
  EXPECT_EQ(fs::file_size(dir_->path() / "shards" / "docs_000002.bin"), 1024u + 2 * 200);
}

TEST_F(TokenizeCommand, RunTrainsOnTheShardsAndGenerateSpeaksText) {
  ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
  // Greedy: after one "hello world" the documents go on with " hello world",
  // after the second comes <|endoftext|>, where generation stops.
  ProcessResult r = run_dscore(
      {"generate", "--checkpoint", (dir_->path() / "ckpt").string(), "--tokenizer", tokenizer_dir(),
       "--prompt", "<|endoftext|>hello world", "--temperature", "0", "--max-new-tokens", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "<|endoftext|>hello world hello world\n") << r.describe();

  // Without a tokenizer a token-shard model takes no text prompt.
  ProcessResult no_tok = run_dscore(
      {"generate", "--checkpoint", (dir_->path() / "ckpt").string(), "--prompt", "hello"});
  EXPECT_EQ(no_tok.exit_code, 2);
  EXPECT_NE(no_tok.err.find("give the tokenizer's folder as --tokenizer DIR"), std::string::npos)
      << no_tok.describe();
}

TEST_F(TokenizeCommand, PrintAndDecode) {
  const fs::path text = dir_->write("print.txt", "hello world<|endoftext|>");
  ProcessResult r =
      run_dscore({"tokenize", "--tokenizer", tokenizer_dir(), "--print", text.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "259,260,111,114,108,100,263\n");
  r = run_dscore({"tokenize", "--tokenizer", tokenizer_dir(), "--decode", "259,260,111,263"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "hello wo<|endoftext|>");
}

TEST_F(TokenizeCommand, WideVocabularyGivesUint32ShardsThatRunReads) {
  TempDir dir("dscore_cli_tokenize_wide");
  fs::create_directories(dir.path() / "tok");
  TinyTokenizer wide;
  wide.extra_added = R"(, {"id": 70000, "content": "<|wide|>", "single_word": false,
      "lstrip": false, "rstrip": false, "normalized": false, "special": true})";
  wide.write((dir.path() / "tok").string());
  std::string text;
  for (int i = 0; i < 40; ++i) text += "hello world <|wide|> ";
  ProcessResult r = run_dscore({"tokenize", "--tokenizer", (dir.path() / "tok").string(), "--out",
                                (dir.path() / "w").string(), "--separator", "<|wide|>",
                                "--val-tokens", "50", dir.write("a.txt", text).string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("(uint32, vocab 70001, separator 70000) to 2 shard(s)"), std::string::npos)
      << r.out;
  ASSERT_TRUE(fs::exists(dir.path() / "w_val_000000.bin"));
  ASSERT_TRUE(fs::exists(dir.path() / "w_train_000001.bin"));

  const fs::path ok = dir.write("ok.json", gpt_config(dir.path(), "w_train_*.bin", 70001, 2, ""));
  r = run_dscore({"run", "--config", ok.string()});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  const fs::path small =
      dir.write("small.json", gpt_config(dir.path(), "w_train_*.bin", kTinyVocabSize, 2, ""));
  r = run_dscore({"run", "--config", small.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Set model.vocab_size to at least 70001"), std::string::npos)
      << r.describe();
}

TEST_F(TokenizeCommand, UsageAndTokenizerErrors) {
  const fs::path text = dir_->write("e.txt", "hello");
  EXPECT_EQ(run_dscore({"tokenize", "--tokenizer", tokenizer_dir(), text.string()}).exit_code,
            2);  // no --out, --print or --decode
  ProcessResult r = run_dscore(
      {"tokenize", "--tokenizer", (dir_->path() / "none").string(), "--print", text.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.err.find("tokenizer folder '" + (dir_->path() / "none").string() + "' does not exist"),
      std::string::npos)
      << r.describe();
  r = run_dscore({"tokenize", "--tokenizer", tokenizer_dir(), "--out",
                  (dir_->path() / "x").string(), "--separator", "<nope>", text.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--separator \"<nope>\" is not a token of"), std::string::npos)
      << r.describe();
  r = run_dscore({"tokenize", "--tokenizer", tokenizer_dir(), "--print",
                  (dir_->path() / "missing.txt").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot read the text file"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace dscore::testing
