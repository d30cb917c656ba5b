// Tests for core/data/token_source.cc through make_batch_source: the text
// and llm.c sources fill the "tokens" input with the file's tokens for the
// given sample indices, in a seeded order any slice of which is computable
// alone, and refuse a non-token model, a bad vocabulary and too little data;
// a file truncated under a running reader fails fill() naming the file.
#include "core/data/token_source.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "core/config/config.h"
#include "core/data/batch.h"
#include "tests/core/data/token_test_util.h"

namespace dscore::data {
namespace {

using ::dscore::testing::ScratchDir;
using ::dscore::testing::TokenModel;
using ::dscore::testing::write_bytes;
using ::dscore::testing::write_shard;

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyz";

config::TrainingConfig token_config(const std::string& type, const std::string& path, bool shuffle,
                                    int64_t train_batch_size = 2, uint64_t seed = 42) {
  config::TrainingConfig cfg;
  cfg.data.type = type;
  cfg.data.path = path;
  cfg.data.shuffle = shuffle;
  cfg.batch = {train_batch_size, train_batch_size, 1};
  cfg.seed = seed;
  return cfg;
}

std::unique_ptr<BatchSource> open_source(const config::TrainingConfig& cfg, const Model& model) {
  Result<std::unique_ptr<BatchSource>> s = make_batch_source(cfg, model);
  if (!s.ok()) ADD_FAILURE() << s.status().message();
  return s.ok() ? std::move(*s) : nullptr;
}

std::string open_error(const config::TrainingConfig& cfg, const Model& model) {
  Result<std::unique_ptr<BatchSource>> s = make_batch_source(cfg, model);
  EXPECT_FALSE(s.ok());
  return s.ok() ? std::string() : s.status().message();
}

// Samples [first, first + count) as rows of T+1 tokens.
std::vector<std::vector<int32_t>> samples(BatchSource& source, const Model& model, int64_t first,
                                          int64_t count) {
  HostBatch batch(model.description(), count);
  Status st = source.fill({first, count}, &batch);
  EXPECT_TRUE(st.ok()) << st.message();
  const int64_t width = model.description().inputs[0]->shape[0];
  const auto* data = static_cast<const int32_t*>(batch.tensor(0).data);
  std::vector<std::vector<int32_t>> rows;
  for (int64_t b = 0; b < count; ++b) rows.emplace_back(data + b * width, data + (b + 1) * width);
  return rows;
}

std::vector<int32_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(TextSource, ReadsOverlappingChunksOfBytesInFileOrder) {
  ScratchDir dir;
  write_bytes(dir.file("abc.txt"), kAlphabet);
  TokenModel model(4);  // 26 bytes -> floor(25 / 4) = 6 chunks of 5
  auto source = open_source(token_config("text", dir.file("abc.txt"), false), model);
  ASSERT_TRUE(source);
  const auto rows = samples(*source, model, 5, 3);  // chunk 5, then epoch 1: chunks 0, 1
  EXPECT_EQ(rows[0], bytes_of("uvwxy"));
  EXPECT_EQ(rows[1], bytes_of("abcde"));
  EXPECT_EQ(rows[2], bytes_of("efghi"));
}

TEST(ShardSource, ShuffledSamplesAreTheFileChunksSampleOrderNames) {
  ScratchDir dir;
  std::vector<uint16_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 40000);
  write_shard(dir.file("s.bin"), tokens);
  TokenModel model(8);  // floor(99 / 8) = 12 chunks
  auto source = open_source(token_config("tokens", dir.file("s.bin"), true, 4, 7), model);
  ASSERT_TRUE(source);
  const SampleOrder order(12, 7, true);
  const auto rows = samples(*source, model, 0, 30);
  std::set<int32_t> first_epoch_starts;
  std::vector<int32_t> in_file_order;
  for (int64_t i = 0; i < 30; ++i) {
    const int64_t chunk = order.chunk_of(i);
    std::vector<int32_t> expected(9);
    std::iota(expected.begin(), expected.end(), static_cast<int32_t>(40000 + chunk * 8));
    EXPECT_EQ(rows[static_cast<size_t>(i)], expected) << "sample " << i;
    if (i < 12) {
      first_epoch_starts.insert(rows[static_cast<size_t>(i)][0]);
      in_file_order.push_back(static_cast<int32_t>(40000 + i * 8));
    }
  }
  EXPECT_EQ(first_epoch_starts.size(), 12u);  // every chunk once per epoch
  std::vector<int32_t> starts;
  for (int64_t i = 0; i < 12; ++i) starts.push_back(rows[static_cast<size_t>(i)][0]);
  EXPECT_NE(starts, in_file_order);  // shuffled
}

TEST(ShardSource, GlobJoinsShardsInNameOrder) {
  ScratchDir dir;
  write_shard(dir.file("train_000002.bin"),
              {200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212});
  write_shard(dir.file("train_000001.bin"), {100, 101, 102, 103, 104, 105, 106, 107, 108, 109});
  TokenModel model(3);  // shard 1: floor(9/3) = 3 chunks, shard 2: floor(12/3) = 4
  auto source = open_source(token_config("tokens", dir.file("train_*.bin"), false), model);
  ASSERT_TRUE(source);
  const auto rows = samples(*source, model, 0, 8);
  EXPECT_EQ(rows[0], (std::vector<int32_t>{100, 101, 102, 103}));
  EXPECT_EQ(rows[2], (std::vector<int32_t>{106, 107, 108, 109}));
  EXPECT_EQ(rows[3], (std::vector<int32_t>{200, 201, 202, 203}));
  EXPECT_EQ(rows[6], (std::vector<int32_t>{209, 210, 211, 212}));
  EXPECT_EQ(rows[7], rows[0]);  // epoch 1 starts over
}

TEST(ShardSource, AnySliceEqualsTheSamplesReadOneByOne) {
  ScratchDir dir;
  std::vector<uint16_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50257);
  write_shard(dir.file("s.bin"), tokens);
  TokenModel model(16);
  const config::TrainingConfig cfg = token_config("tokens", dir.file("s.bin"), true);
  auto run = open_source(cfg, model);
  auto resumed = open_source(cfg, model);  // e.g. another rank, or a resumed run
  ASSERT_TRUE(run && resumed);
  const auto slice = samples(*run, model, 25, 6);
  for (int64_t b = 0; b < 6; ++b)
    EXPECT_EQ(samples(*resumed, model, 25 + b, 1)[0], slice[static_cast<size_t>(b)]);
}

TEST(ShardSource, DifferentSeedsReadDifferentOrders) {
  ScratchDir dir;
  std::vector<uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_shard(dir.file("s.bin"), tokens);
  TokenModel model(9);  // 111 chunks
  auto a = open_source(token_config("tokens", dir.file("s.bin"), true, 2, 1), model);
  auto b = open_source(token_config("tokens", dir.file("s.bin"), true, 2, 2), model);
  ASSERT_TRUE(a && b);
  EXPECT_NE(samples(*a, model, 0, 20), samples(*b, model, 0, 20));
}

TEST(TokenSourceErrors, ModelWithoutATokensInput) {
  ScratchDir dir;
  write_bytes(dir.file("abc.txt"), kAlphabet);
  TokenModel model(4, "x", DSCORE_DTYPE_F32);
  const std::string m = open_error(token_config("text", dir.file("abc.txt"), true), model);
  EXPECT_CONTAINS(m, "data.type \"text\" needs a token model");
  EXPECT_CONTAINS(m, "model 'token_test' declares the input \"x\" (fp32, [5])");
}

TEST(TokenSourceErrors, TokenOutsideTheModelSectionsVocabulary) {
  ScratchDir dir;
  write_bytes(dir.file("abc.txt"), kAlphabet);
  TokenModel model(4);
  config::TrainingConfig cfg = token_config("text", dir.file("abc.txt"), true);
  cfg.model = config::PluginRef{"gpt", json::Value::object(), "model", {}};
  cfg.model->params.set("vocab_size", json::Value(100));
  const std::string m = open_error(cfg, model);
  EXPECT_CONTAINS(m, "abc.txt");
  EXPECT_CONTAINS(m, "position 3 (byte offset 3) has value 100");  // 'd'
  EXPECT_CONTAINS(m, "model.vocab_size 100");
  EXPECT_CONTAINS(m, "set model.vocab_size to 256");

  cfg.model->params.set("vocab_size", json::Value(256));
  EXPECT_TRUE(make_batch_source(cfg, model).ok());
}

TEST(TokenSourceErrors, LessDataThanOneGlobalBatch) {
  ScratchDir dir;
  write_bytes(dir.file("abc.txt"), kAlphabet);
  TokenModel model(4);  // 6 chunks
  EXPECT_TRUE(make_batch_source(token_config("text", dir.file("abc.txt"), true, 6), model).ok());
  const std::string m = open_error(token_config("text", dir.file("abc.txt"), true, 8), model);
  EXPECT_CONTAINS(m, "abc.txt");
  EXPECT_CONTAINS(m, "holds 26 tokens: 6 samples of 5 tokens");
  EXPECT_CONTAINS(m, "8 * 4 + 1 = 33 tokens");
  EXPECT_CONTAINS(m, "lower train_batch_size");
}

TEST(TokenSourceErrors, FileProblemsNameTheFile) {
  ScratchDir dir;
  TokenModel model(4);
  EXPECT_CONTAINS(open_error(token_config("tokens", dir.file("fineweb_*.bin"), true), model),
                  "fineweb_*.bin' matches no file");
  write_bytes(dir.file("abc.txt"), kAlphabet);
  EXPECT_CONTAINS(open_error(token_config("tokens", dir.file("abc.txt"), true), model),
                  "abc.txt' is not an llm.c token shard");
  EXPECT_CONTAINS(open_error(token_config("text", "", true), model), "data.path is not set");
}

// A data file truncated while training reads it (rewritten in place) used
// to end the process with SIGBUS on the memory mapping; the reader's next
// fill() fails instead, naming the file, and the process goes on.
TEST(TokenSourceErrors, FileTruncatedUnderARunningReaderFailsTheFillNamingTheFile) {
  ScratchDir dir;
  const std::string path = dir.file("corpus.txt");
  std::string text(1 << 20, ' ');
  for (size_t i = 0; i < text.size(); ++i) text[i] = kAlphabet[i % kAlphabet.size()];
  write_bytes(path, text);
  TokenModel model(64);
  auto source = open_source(token_config("text", path, true, 8), model);
  ASSERT_TRUE(source);

  std::atomic<int64_t> fills{0};
  std::atomic<bool> stopped{false};
  Status error;
  std::thread reader([&] {
    HostBatch batch(model.description(), 8);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int64_t first = 0; std::chrono::steady_clock::now() < deadline; first += 8) {
      error = source->fill({first, 8}, &batch);
      if (!error.ok()) break;
      fills.fetch_add(1);
    }
    stopped = true;
  });
  while (fills.load() < 10 && !stopped.load()) std::this_thread::yield();
  EXPECT_GE(fills.load(), 10) << "the reader stopped before the truncation: " << error.message();
  EXPECT_EQ(::truncate(path.c_str(), 1000), 0);
  reader.join();
  EXPECT_EQ(error.code(), DSCORE_DATA_LOSS) << error.message();
  EXPECT_CONTAINS(error.message(),
                  "data file '" + path + "' changed while this run was reading it");
}

TEST(TokenSourceConfig, DataSectionFromTheConfigFile) {
  ScratchDir dir;
  write_bytes(dir.file("abc.txt"), kAlphabet);
  const std::string text = R"({"train_batch_size": 2, "model": {"type": "gpt", "vocab_size": 256},
      "data": {"type": "text", "path": ")" +
                           dir.file("abc.txt") + R"(", "shuffle": false}})";
  config::LoadedConfig loaded = config::load_config_text(text, "ds_config.json", {});
  ASSERT_TRUE(loaded.ok()) << loaded.errors[0].message;
  EXPECT_FALSE(loaded.config->data.shuffle);
  TokenModel model(4);
  auto source = open_source(*loaded.config, model);
  ASSERT_TRUE(source);
  EXPECT_EQ(samples(*source, model, 1, 1)[0], bytes_of("efghi"));

  config::LoadedConfig defaults =
      config::load_config_text(R"({"train_batch_size": 2})", "ds_config.json", {});
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults.config->data.shuffle);
}

}  // namespace
}  // namespace dscore::data
