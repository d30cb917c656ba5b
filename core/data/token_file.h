// One data file, memory-mapped read-only and seen as a sequence of tokens:
// any file as byte tokens (data.type "text"), or an llm.c token shard
// (data.type "tokens": a 256 x int32 little-endian header {20240520, 1,
// token count, 0...}, then that many uint16 tokens). Opening checks the
// format; check_vocab scans every token once. Nothing is read into RAM.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace dscore::data {

// A read-only private mapping of a whole regular, non-empty file.
// Move-only; unmaps on destruction.
class MappedFile {
 public:
  // NOT_FOUND for a missing file; INVALID_ARGUMENT for a directory or an
  // empty file; UNAVAILABLE when open/mmap fail otherwise.
  static Result<MappedFile> open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

enum class TokenFormat {
  kBytes,      // data.type "text": each byte is a token 0..255
  kLlmcShard,  // data.type "tokens": llm.c shard of uint16 tokens
};

// llm.c's shard header (dev/data/data_common.py write_datafile).
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;

// Immutable after open(); all const members are thread-safe.
class TokenFile {
 public:
  // Errors name the file, what is wrong and the fix: missing, empty, not an
  // llm.c shard (magic), unsupported version, size not matching the header.
  static Result<TokenFile> open(const std::string& path, TokenFormat format);

  const std::string& path() const { return file_.path(); }
  TokenFormat format() const { return format_; }
  int64_t token_count() const { return count_; }

  // Tokens [first, first + count) as int32 into out (count values).
  void copy(int64_t first, int64_t count, int32_t* out) const;
  int32_t token(int64_t i) const;
  // Where token i starts in the file, for messages.
  uint64_t byte_offset(int64_t i) const;

  // INVALID_ARGUMENT naming the first token >= vocab_size (its position,
  // byte offset and value, the largest token, and the fix). One linear scan
  // of the mapping (parallel), skipped when no token of the format can reach
  // vocab_size.
  Status check_vocab(int64_t vocab_size) const;

 private:
  TokenFile(MappedFile file, TokenFormat format, const uint8_t* tokens, int64_t count)
      : file_(std::move(file)), format_(format), tokens_(tokens), count_(count) {}
  MappedFile file_;
  TokenFormat format_;
  const uint8_t* tokens_;  // first token byte inside file_
  int64_t count_;
};

// data.path -> the files it names, in order: the path itself when such a file
// exists, else the matches of the glob(3) pattern, sorted bytewise. NOT_FOUND
// (naming the pattern and the working directory) when nothing matches.
Result<std::vector<std::string>> expand_data_path(const std::string& pattern);

}  // namespace dscore::data
