// Tests for core/data/token_shard_writer.cc with core/data/token_file.cc:
// shards round-trip through TokenFile in both of llm.c's formats (uint16,
// and uint32 past 65536 ids, with check_vocab), shard cutting and naming,
// and a truncated wide shard failing to open.
#include "core/data/token_shard_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/data/token_file.h"
#include "tests/core/data/token_test_util.h"

namespace dscore::data {
namespace {

using ::dscore::testing::ScratchDir;

std::vector<int32_t> read_all(const std::string& path) {
  Result<TokenFile> f = TokenFile::open(path, TokenFormat::kLlmcShard);
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return {};
  std::vector<int32_t> out(static_cast<size_t>(f->token_count()));
  EXPECT_TRUE(f->copy(0, f->token_count(), out.data()).ok());
  return out;
}

int32_t header_int(const std::string& path, int i) {
  std::ifstream in(path, std::ios::binary);
  int32_t v[3];
  in.read(reinterpret_cast<char*>(v), sizeof v);
  return v[i];
}

TEST(TokenShardWriter, Uint16ShardsRoundTripAndAreCutAtTheShardSize) {
  ScratchDir dir;
  auto w = TokenShardWriter::create(
      {.prefix = dir.file("d"), .vocab_size = 65536, .shard_tokens = 4, .val_tokens = 0});
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->tokens_width(), 2);
  ASSERT_TRUE(w->append({0, 1, 65535}).ok());
  ASSERT_TRUE(w->append({7, 8, 9, 10, 11, 12}).ok());
  Result<std::vector<std::string>> files = w->finish();
  ASSERT_TRUE(files.ok()) << files.status().message();
  ASSERT_EQ(*files, (std::vector<std::string>{dir.file("d_000000.bin"), dir.file("d_000001.bin"),
                                              dir.file("d_000002.bin")}));
  EXPECT_EQ(w->tokens_written(), 9);
  EXPECT_EQ(header_int((*files)[0], 0), kLlmcMagic);
  EXPECT_EQ(header_int((*files)[0], 1), kLlmcVersion);
  EXPECT_EQ(read_all((*files)[0]), (std::vector<int32_t>{0, 1, 65535, 7}));
  EXPECT_EQ(read_all((*files)[1]), (std::vector<int32_t>{8, 9, 10, 11}));
  EXPECT_EQ(read_all((*files)[2]), (std::vector<int32_t>{12}));  // the partial last shard
}

TEST(TokenShardWriter, WideVocabularyWritesUint32ShardsThatCheckVocabReads) {
  ScratchDir dir;
  auto w = TokenShardWriter::create(
      {.prefix = dir.file("w"), .vocab_size = 128256, .shard_tokens = 100, .val_tokens = 2});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->tokens_width(), 4);
  ASSERT_TRUE(w->append({128000, 5, 70000, 128255, 3}).ok());
  Result<std::vector<std::string>> files = w->finish();
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(*files, (std::vector<std::string>{dir.file("w_val_000000.bin"),
                                              dir.file("w_train_000001.bin")}));
  EXPECT_EQ(header_int((*files)[1], 0), kLlmcWideMagic);
  EXPECT_EQ(header_int((*files)[1], 1), kLlmcWideVersion);
  EXPECT_EQ(read_all((*files)[0]), (std::vector<int32_t>{128000, 5}));
  EXPECT_EQ(read_all((*files)[1]), (std::vector<int32_t>{70000, 128255, 3}));

  Result<TokenFile> f = TokenFile::open((*files)[1], TokenFormat::kLlmcShard);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->check_vocab(128256).ok());
  Status s = f->check_vocab(100000);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(
      s.message(),
      "the token at position 1 (byte offset 1028) is 128255, not below model.vocab_size 100000");
  EXPECT_CONTAINS(s.message(), "the largest token in the shard is 128255");
}

TEST(TokenShardWriter, TruncatedWideShardIsDataLoss) {
  ScratchDir dir;
  auto w = TokenShardWriter::create({.prefix = dir.file("t"), .vocab_size = 70000});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->append({1, 2, 3}).ok());
  Result<std::vector<std::string>> files = w->finish();
  ASSERT_TRUE(files.ok());
  std::filesystem::resize_file((*files)[0], 1024 + 4 * 3 - 2);
  Result<TokenFile> f = TokenFile::open((*files)[0], TokenFormat::kLlmcShard);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), DSCORE_DATA_LOSS);
  EXPECT_CONTAINS(f.status().message(), "is truncated: its header says 3 tokens (1036 bytes");
}

TEST(TokenShardWriter, IdsOutsideTheVocabularyAndBadSizesAreErrors) {
  ScratchDir dir;
  auto w = TokenShardWriter::create({.prefix = dir.file("x"), .vocab_size = 10});
  ASSERT_TRUE(w.ok());
  Status s = w->append({3, 10});
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.message(), "token id 10 is outside the vocabulary [0, 10)");
  auto bad = TokenShardWriter::create(
      {.prefix = dir.file("y"), .vocab_size = 10, .shard_tokens = int64_t{1} << 31});
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "llm.c's header counts tokens in an int32");
}

}  // namespace
}  // namespace dscore::data
