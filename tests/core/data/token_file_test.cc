// Tests for core/data/token_file.cc: text files read as bytes, llm.c shards
// read after their header, data.path globbing, every bad file giving an
// error that names the file and what is wrong, and a file truncated or
// rewritten after it was opened failing the read (not a SIGBUS).
#include "core/data/token_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "tests/core/data/token_test_util.h"

namespace dscore::data {
namespace {

using ::dscore::testing::ScratchDir;
using ::dscore::testing::ShardHeader;
using ::dscore::testing::write_bytes;
using ::dscore::testing::write_shard;

std::vector<int32_t> all_tokens(const TokenFile& f) {
  std::vector<int32_t> out(static_cast<size_t>(f.token_count()));
  EXPECT_TRUE(f.copy(0, f.token_count(), out.data()).ok());
  return out;
}

TEST(TokenFile, TextFileTokensAreItsBytes) {
  ScratchDir dir;
  const std::string bytes = std::string("Hi\n") + '\xff' + '\0' + 'z';
  write_bytes(dir.file("a.txt"), bytes);
  Result<TokenFile> f = TokenFile::open(dir.file("a.txt"), TokenFormat::kBytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->token_count(), 6);
  EXPECT_EQ(all_tokens(*f), (std::vector<int32_t>{'H', 'i', '\n', 255, 0, 'z'}));
  EXPECT_EQ(f->byte_offset(4), 4u);
}

TEST(TokenFile, LlmcShardTokensFollowTheHeader) {
  ScratchDir dir;
  const std::vector<uint16_t> tokens = {50256, 0, 1, 65535, 300, 7};
  write_shard(dir.file("s.bin"), tokens);
  Result<TokenFile> f = TokenFile::open(dir.file("s.bin"), TokenFormat::kLlmcShard);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->token_count(), 6);
  EXPECT_EQ(all_tokens(*f), (std::vector<int32_t>{50256, 0, 1, 65535, 300, 7}));
  EXPECT_EQ(f->byte_offset(3), 1024u + 6u);
  std::vector<int32_t> mid(2);
  ASSERT_TRUE(f->copy(2, 2, mid.data()).ok());
  EXPECT_EQ(mid, (std::vector<int32_t>{1, 65535}));
}

TEST(TokenFile, ReadAfterTheFileWasTruncatedFailsNamingTheFile) {
  ScratchDir dir;
  const std::string path = dir.file("corpus.txt");
  write_bytes(path, std::string(65536, 'a'));
  Result<TokenFile> f = TokenFile::open(path, TokenFormat::kBytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::vector<int32_t> out(10);
  ASSERT_TRUE(f->copy(60000, 10, out.data()).ok());
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  const Status s = f->copy(60000, 10, out.data());
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_EQ(s.message(),
            "data file '" + path +
                "' changed while this run was reading it: it had 65536 bytes when the run "
                "opened it and has 100 now. A run's samples must stay as they were when it "
                "started; restore the file (or point data.path at a copy nothing writes to) and "
                "resume from the last checkpoint");
  // Also where the bytes are still there: the data is no longer the run's.
  EXPECT_EQ(f->copy(0, 10, out.data()).code(), DSCORE_DATA_LOSS);
}

TEST(TokenFile, ReadAfterASameSizeRewriteFailsNamingTheFile) {
  ScratchDir dir;
  const std::string path = dir.file("s.bin");
  write_shard(path, {1, 2, 3, 4});
  Result<TokenFile> f = TokenFile::open(path, TokenFormat::kLlmcShard);
  ASSERT_TRUE(f.ok()) << f.status().message();
  write_shard(path, {5, 6, 7, 8});
  // A later modification time than at open (file times can be coarser than
  // the time this test takes).
  std::filesystem::last_write_time(
      path, std::filesystem::last_write_time(path) + std::chrono::seconds(5));
  std::vector<int32_t> out(4);
  const Status s = f->copy(0, 4, out.data());
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_CONTAINS(s.message(), "data file '" + path +
                                   "' changed while this run was reading it: it has the size it "
                                   "had when the run opened it (1032 bytes) but another "
                                   "modification time: it was rewritten in place (or touched)");
}

TEST(TokenFile, AFileReplacedByRenameIsReadAsOpened) {
  ScratchDir dir;
  const std::string path = dir.file("corpus.txt");
  write_bytes(path, "abcdef");
  Result<TokenFile> f = TokenFile::open(path, TokenFormat::kBytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  write_bytes(dir.file("new.txt"), "xy");
  std::filesystem::rename(dir.file("new.txt"), path);
  EXPECT_EQ(all_tokens(*f), (std::vector<int32_t>{'a', 'b', 'c', 'd', 'e', 'f'}));
}

Status open_error(const std::string& path, TokenFormat format) {
  Result<TokenFile> f = TokenFile::open(path, format);
  return f.ok() ? Status::Ok() : f.status();
}

TEST(TokenFile, MissingFile) {
  ScratchDir dir;
  Status s = open_error(dir.file("nope.bin"), TokenFormat::kLlmcShard);
  EXPECT_EQ(s.code(), DSCORE_NOT_FOUND);
  EXPECT_CONTAINS(s.message(), "nope.bin");
  EXPECT_CONTAINS(s.message(), "does not exist");
}

TEST(TokenFile, EmptyFile) {
  ScratchDir dir;
  write_bytes(dir.file("empty.txt"), "");
  for (TokenFormat format : {TokenFormat::kBytes, TokenFormat::kLlmcShard}) {
    Status s = open_error(dir.file("empty.txt"), format);
    EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
    EXPECT_CONTAINS(s.message(), "empty.txt");
    EXPECT_CONTAINS(s.message(), "is empty");
  }
}

TEST(TokenFile, DirectoryIsNotADataFile) {
  ScratchDir dir;
  std::filesystem::create_directory(dir.file("shards"));
  Status s = open_error(dir.file("shards"), TokenFormat::kBytes);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.message(), "shards' is a directory");
}

TEST(TokenFile, TextFileIsNotAnLlmcShard) {
  ScratchDir dir;
  write_bytes(dir.file("short.txt"), "hello world");
  Status s = open_error(dir.file("short.txt"), TokenFormat::kLlmcShard);
  EXPECT_CONTAINS(s.message(), "short.txt");
  EXPECT_CONTAINS(s.message(), "is not an llm.c token shard");
  EXPECT_CONTAINS(s.message(), "data.type \"text\"");

  write_bytes(dir.file("long.txt"), std::string(4000, 'a'));
  s = open_error(dir.file("long.txt"), TokenFormat::kLlmcShard);
  EXPECT_CONTAINS(s.message(), "long.txt");
  EXPECT_CONTAINS(s.message(), "is not an llm.c token shard");
  EXPECT_CONTAINS(s.message(), "expected magic 20240520 (uint16 tokens) or 20240801");
}

TEST(TokenFile, WrongMagic) {
  ScratchDir dir;
  write_shard(dir.file("m.bin"), {1, 2, 3}, ShardHeader{.magic = 20240802});
  Status s = open_error(dir.file("m.bin"), TokenFormat::kLlmcShard);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.message(), "m.bin");
  EXPECT_CONTAINS(s.message(), "magic is 20240802, expected magic 20240520");
}

TEST(TokenFile, WrongVersion) {
  ScratchDir dir;
  write_shard(dir.file("v.bin"), {1, 2, 3}, ShardHeader{.version = 2});
  Status s = open_error(dir.file("v.bin"), TokenFormat::kLlmcShard);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.message(), "v.bin");
  EXPECT_CONTAINS(s.message(), "and version 2");
  EXPECT_CONTAINS(s.message(), "reads version 1 with that magic (uint16 tokens)");
}

TEST(TokenFile, TruncatedShard) {
  ScratchDir dir;
  write_shard(dir.file("t.bin"), {1, 2, 3, 4, 5}, ShardHeader{.drop_bytes = 3});
  Status s = open_error(dir.file("t.bin"), TokenFormat::kLlmcShard);
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_CONTAINS(s.message(), "t.bin");
  EXPECT_CONTAINS(s.message(), "is truncated: its header says 5 tokens (1034 bytes");
  EXPECT_CONTAINS(s.message(), "the file has 1031 bytes");
}

TEST(TokenFile, ShardLongerThanItsHeaderSays) {
  ScratchDir dir;
  write_shard(dir.file("x.bin"), {1, 2, 3}, ShardHeader{.extra_bytes = 2});
  Status s = open_error(dir.file("x.bin"), TokenFormat::kLlmcShard);
  EXPECT_EQ(s.code(), DSCORE_DATA_LOSS);
  EXPECT_CONTAINS(s.message(), "x.bin");
  EXPECT_CONTAINS(s.message(), "its header says 3 tokens");
}

TEST(TokenFile, ShardWithoutTokens) {
  ScratchDir dir;
  write_shard(dir.file("z.bin"), {});
  Status s = open_error(dir.file("z.bin"), TokenFormat::kLlmcShard);
  EXPECT_CONTAINS(s.message(), "z.bin");
  EXPECT_CONTAINS(s.message(), "holds no tokens");
}

TEST(TokenFile, VocabCheckOfTextNamesTheByteAndTheFix) {
  ScratchDir dir;
  write_bytes(dir.file("v.txt"), std::string("abc") + '\xe2' + "d" + '\xf0');
  Result<TokenFile> f = TokenFile::open(dir.file("v.txt"), TokenFormat::kBytes);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->check_vocab(256).ok());
  EXPECT_TRUE(f->check_vocab(241).ok());  // largest byte is 240
  Status s = f->check_vocab(128);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.message(), "v.txt");
  EXPECT_CONTAINS(s.message(), "position 3 (byte offset 3) has value 226");
  EXPECT_CONTAINS(s.message(), "model.vocab_size 128");
  EXPECT_CONTAINS(s.message(), "set model.vocab_size to 256");
}

TEST(TokenFile, VocabCheckOfShardNamesTheTokenAndTheFix) {
  ScratchDir dir;
  std::vector<uint16_t> tokens(3000, 17);
  tokens[2500] = 50300;
  tokens[2700] = 50400;
  write_shard(dir.file("gpt.bin"), tokens);
  Result<TokenFile> f = TokenFile::open(dir.file("gpt.bin"), TokenFormat::kLlmcShard);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->check_vocab(50401).ok());
  Status s = f->check_vocab(50257);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.message(), "gpt.bin");
  EXPECT_CONTAINS(s.message(), "position 2500 (byte offset 6024) is 50300");
  EXPECT_CONTAINS(s.message(), "model.vocab_size 50257");
  EXPECT_CONTAINS(s.message(), "at least 50401");
}

TEST(DataPath, PlainFileAndSortedGlob) {
  ScratchDir dir;
  write_shard(dir.file("fineweb_train_000002.bin"), {1, 2});
  write_shard(dir.file("fineweb_train_000001.bin"), {1, 2});
  write_shard(dir.file("fineweb_val_000000.bin"), {1, 2});
  Result<std::vector<std::string>> one = expand_data_path(dir.file("fineweb_val_000000.bin"));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<std::string>{dir.file("fineweb_val_000000.bin")});
  Result<std::vector<std::string>> train = expand_data_path(dir.file("fineweb_train_*.bin"));
  ASSERT_TRUE(train.ok()) << train.status().message();
  EXPECT_EQ(*train, (std::vector<std::string>{dir.file("fineweb_train_000001.bin"),
                                              dir.file("fineweb_train_000002.bin")}));
}

TEST(DataPath, NothingMatches) {
  ScratchDir dir;
  Result<std::vector<std::string>> r = expand_data_path(dir.file("fineweb_train_*.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_NOT_FOUND);
  EXPECT_CONTAINS(r.status().message(), "fineweb_train_*.bin' matches no file");
  r = expand_data_path(dir.file("missing.txt"));
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "missing.txt': no such file");
  r = expand_data_path("");
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "data.path is not set");
}

}  // namespace
}  // namespace dscore::data
