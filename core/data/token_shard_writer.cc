// Shard cutting, naming and the llm.c header of token_shard_writer.h.
#include "core/data/token_shard_writer.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "core/data/token_file.h"

namespace dscore::data {

static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

Result<TokenShardWriter> TokenShardWriter::create(Options options) {
  if (options.prefix.empty())
    return invalid_argument("the token shards need a name prefix (--out)");
  if (options.vocab_size <= 0 || options.vocab_size > (int64_t{1} << 32))
    return invalid_argument("vocab_size " + std::to_string(options.vocab_size) +
                            " cannot be written as llm.c token shards (1 to 2^32 ids)");
  if (options.shard_tokens <= 0 || options.shard_tokens > INT32_MAX)
    return invalid_argument("the shard size must be 1 to " + std::to_string(INT32_MAX) +
                            " tokens (llm.c's header counts tokens in an int32); got " +
                            std::to_string(options.shard_tokens));
  if (options.val_tokens < 0 || options.val_tokens > INT32_MAX)
    return invalid_argument("the validation shard must hold 0 to " + std::to_string(INT32_MAX) +
                            " tokens; got " + std::to_string(options.val_tokens));
  return TokenShardWriter(std::move(options));
}

int64_t TokenShardWriter::capacity() const {
  return shard_index_ == 0 && options_.val_tokens > 0 ? options_.val_tokens : options_.shard_tokens;
}

Status TokenShardWriter::append(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= options_.vocab_size)
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(options_.vocab_size) + ")");
    pending_.push_back(id);
    ++total_;
    if (static_cast<int64_t>(pending_.size()) == capacity()) DSCORE_RETURN_IF_ERROR(flush_shard());
  }
  return Status::Ok();
}

Status TokenShardWriter::flush_shard() {
  if (pending_.empty()) return Status::Ok();
  const char* split = options_.val_tokens <= 0 ? "" : shard_index_ == 0 ? "_val" : "_train";
  char number[16];
  std::snprintf(number, sizeof number, "_%06d.bin", shard_index_);
  const std::string path = options_.prefix + split + number;

  std::vector<int32_t> header(static_cast<size_t>(kLlmcHeaderInts), 0);
  header[0] = wide_ ? kLlmcWideMagic : kLlmcMagic;
  header[1] = wide_ ? kLlmcWideVersion : kLlmcVersion;
  header[2] = static_cast<int32_t>(pending_.size());
  std::vector<uint8_t> body(pending_.size() * (wide_ ? 4 : 2));
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (wide_) {
      const auto v = static_cast<uint32_t>(pending_[i]);
      std::memcpy(body.data() + 4 * i, &v, 4);
    } else {
      const auto v = static_cast<uint16_t>(pending_[i]);
      std::memcpy(body.data() + 2 * i, &v, 2);
    }
  }
  DSCORE_ASSIGN_OR_RETURN(checkpoint::DurableFile file, checkpoint::DurableFile::create(path));
  DSCORE_RETURN_IF_ERROR(file.write(header.data(), header.size() * sizeof(int32_t)));
  DSCORE_RETURN_IF_ERROR(file.write(body.data(), body.size()));
  DSCORE_RETURN_IF_ERROR(file.commit());
  written_.push_back(path);
  pending_.clear();
  ++shard_index_;
  return Status::Ok();
}

Result<std::vector<std::string>> TokenShardWriter::finish() {
  DSCORE_RETURN_IF_ERROR(flush_shard());
  return written_;
}

}  // namespace dscore::data
