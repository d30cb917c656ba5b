// One data file, read where a sample lies and seen as a sequence of tokens:
// any file as byte tokens (data.type "text"), or an llm.c token shard
// (data.type "tokens": a 256 x int32 little-endian header {magic, version,
// token count, 0...}, then that many tokens: {20240520, 1} uint16 tokens
// (llm.c's GPT-2 shards), {20240801, 7} uint32 tokens (llm.c's Llama 3
// shards, for vocabularies past 65536)). Opening checks the format;
// check_vocab scans every token once. Nothing is read into RAM whole.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace dscore::data {

// A regular, non-empty file held open read-only and read with pread(2).
// Its size and modification time at open are kept, and every read checks
// them: a file rewritten or truncated under a running job fails that read
// with DATA_LOSS naming the file and what changed (through a memory mapping
// the same truncation kills the process with SIGBUS). A file replaced by
// rename is read as it was when opened: the descriptor holds the old one.
// Move-only; closes on destruction; read() is thread-safe.
class DataFile {
 public:
  // NOT_FOUND for a missing file; INVALID_ARGUMENT for a directory or an
  // empty file; UNAVAILABLE when open/stat fail otherwise.
  static Result<DataFile> open(const std::string& path);

  DataFile(DataFile&& other) noexcept;
  DataFile& operator=(DataFile&& other) noexcept;
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  ~DataFile();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // at open

  // Bytes [offset, offset + count) of the file as opened into out. DATA_LOSS
  // when the file changed since open (size or modification time) or is now
  // too short; UNAVAILABLE when the read fails (an I/O error).
  Status read(uint64_t offset, uint64_t count, void* out) const;

 private:
  DataFile(std::string path, int fd, uint64_t size, timespec mtime)
      : path_(std::move(path)), fd_(fd), size_(size), mtime_(mtime) {}
  Status changed(const std::string& what) const;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  timespec mtime_{};
};

enum class TokenFormat {
  kBytes,      // data.type "text": each byte is a token 0..255
  kLlmcShard,  // data.type "tokens": llm.c shard of uint16 or uint32 tokens
};

// llm.c's shard header (dev/data/data_common.py write_datafile).
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
inline constexpr int32_t kLlmcMagic = 20240520;  // uint16 tokens
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int32_t kLlmcWideMagic = 20240801;  // uint32 tokens
inline constexpr int32_t kLlmcWideVersion = 7;

// Immutable after open(); all const members are thread-safe.
class TokenFile {
 public:
  // Errors name the file, what is wrong and the fix: missing, empty, not an
  // llm.c shard (magic), unsupported version, size not matching the header.
  // Tokens of a uint32 shard past INT32_MAX read as negative values:
  // check_vocab reports them.
  static Result<TokenFile> open(const std::string& path, TokenFormat format);

  const std::string& path() const { return file_.path(); }
  TokenFormat format() const { return format_; }
  int64_t token_count() const { return count_; }

  // Tokens [first, first + count) as int32 into out (count values). Fails
  // as DataFile::read when the file changed since open.
  Status copy(int64_t first, int64_t count, int32_t* out) const;
  // Where token i starts in the file, for messages.
  uint64_t byte_offset(int64_t i) const;

  // INVALID_ARGUMENT naming the first token >= vocab_size (its position,
  // byte offset and value, the largest token, and the fix). One linear scan
  // of the file (parallel), skipped when no token of the format can reach
  // vocab_size.
  Status check_vocab(int64_t vocab_size) const;

 private:
  TokenFile(DataFile file, TokenFormat format, uint64_t width, uint64_t first_byte, int64_t count)
      : file_(std::move(file)),
        format_(format),
        width_(width),
        first_byte_(first_byte),
        count_(count) {}
  uint64_t width() const { return width_; }  // bytes per token: 1, 2 or 4
  // Tokens [first, first + count) as they are in the file.
  Status read_raw(int64_t first, int64_t count, uint8_t* out) const;
  // The index of the first token >= vocab_size, or -1.
  Result<int64_t> first_token_at_least(int64_t vocab_size) const;
  DataFile file_;
  TokenFormat format_;
  uint64_t width_;
  uint64_t first_byte_;  // where token 0 starts in the file
  int64_t count_;
};

// data.path -> the files it names, in order: the path itself when such a file
// exists, else the matches of the glob(3) pattern, sorted bytewise. NOT_FOUND
// (naming the pattern and the working directory) when nothing matches.
Result<std::vector<std::string>> expand_data_path(const std::string& pattern);

}  // namespace dscore::data
