// Writes token shards in llm.c's format (token_file.h), as `dscore tokenize`
// does: uint16 tokens (magic 20240520, version 1) when every id fits,
// otherwise uint32 (magic 20240801, version 7). Tokens are cut into shards
// of at most shard_tokens; optionally the first val_tokens go to a
// validation shard first, llm.c's naming: PREFIX_val_000000.bin, then
// PREFIX_train_000001.bin, ...; without one, PREFIX_000000.bin, ... Tokens
// stream into the open shard's temporary file; a full shard gets its
// header's count and is committed durably (fsync, rename), so a crash never
// leaves a partial shard under a final name, and memory holds a write
// buffer, not a shard. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/durable_file.h"

namespace dscore::data {

class TokenShardWriter {
 public:
  struct Options {
    std::string prefix;                // PREFIX of the file names (may hold a folder)
    int64_t vocab_size = 0;            // ids lie in [0, vocab_size): picks the token width
    int64_t shard_tokens = 100000000;  // per shard, at most INT32_MAX (llm.c's default 1e8)
    int64_t val_tokens = 0;            // > 0: a validation shard of these first tokens
  };
  static Result<TokenShardWriter> create(Options options);

  // Appends ids (each in [0, vocab_size)); writes every shard that fills.
  Status append(const std::vector<int32_t>& ids);
  // Writes the last, partial shard. The files written, in order.
  Result<std::vector<std::string>> finish();

  int tokens_width() const { return wide_ ? 4 : 2; }  // bytes per token
  int64_t tokens_written() const { return total_; }

 private:
  explicit TokenShardWriter(Options options)
      : options_(std::move(options)), wide_(options_.vocab_size > 65536) {}
  Status open_shard();
  Status commit_shard();
  int64_t capacity() const;  // of the shard being filled

  Options options_;
  bool wide_;
  std::optional<checkpoint::DurableFile> shard_;  // the shard being filled
  int64_t in_shard_ = 0;                          // its tokens so far
  std::vector<uint8_t> chunk_;                    // tokens encoded for one write
  int shard_index_ = 0;
  int64_t total_ = 0;
  std::vector<std::string> written_;
};

}  // namespace dscore::data
