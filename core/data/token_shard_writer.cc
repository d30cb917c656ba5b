// Shard cutting, naming and the llm.c header of token_shard_writer.h.
#include "core/data/token_shard_writer.h"

#include <algorithm>
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

Status TokenShardWriter::open_shard() {
  const char* split = options_.val_tokens <= 0 ? "" : shard_index_ == 0 ? "_val" : "_train";
  char number[16];
  std::snprintf(number, sizeof number, "_%06d.bin", shard_index_);
  DSCORE_ASSIGN_OR_RETURN(checkpoint::DurableFile file,
                          checkpoint::DurableFile::create(options_.prefix + split + number));
  shard_.emplace(std::move(file));
  in_shard_ = 0;
  const std::vector<int32_t> header(static_cast<size_t>(kLlmcHeaderInts), 0);  // count: at commit
  return shard_->write(header.data(), header.size() * sizeof(int32_t));
}

Status TokenShardWriter::commit_shard() {
  const int32_t header[3] = {wide_ ? kLlmcWideMagic : kLlmcMagic,
                             wide_ ? kLlmcWideVersion : kLlmcVersion,
                             static_cast<int32_t>(in_shard_)};
  DSCORE_RETURN_IF_ERROR(shard_->write_at(0, header, sizeof header));
  DSCORE_RETURN_IF_ERROR(shard_->commit());
  written_.push_back(shard_->path());
  shard_.reset();
  ++shard_index_;
  return Status::Ok();
}

Status TokenShardWriter::append(const std::vector<int32_t>& ids) {
  const size_t width = wide_ ? 4 : 2;
  for (size_t i = 0; i < ids.size();) {
    if (!shard_) DSCORE_RETURN_IF_ERROR(open_shard());
    // As many tokens as the shard still takes, encoded little-endian.
    const size_t n = std::min(ids.size() - i, static_cast<size_t>(capacity() - in_shard_));
    chunk_.resize(n * width);
    for (size_t k = 0; k < n; ++k) {
      const int32_t id = ids[i + k];
      if (id < 0 || id >= options_.vocab_size)
        return invalid_argument("token id " + std::to_string(id) +
                                " is outside the vocabulary [0, " +
                                std::to_string(options_.vocab_size) + ")");
      if (wide_) {
        const auto v = static_cast<uint32_t>(id);
        std::memcpy(chunk_.data() + 4 * k, &v, 4);
      } else {
        const auto v = static_cast<uint16_t>(id);
        std::memcpy(chunk_.data() + 2 * k, &v, 2);
      }
    }
    DSCORE_RETURN_IF_ERROR(shard_->write(chunk_.data(), chunk_.size()));
    in_shard_ += static_cast<int64_t>(n);
    total_ += static_cast<int64_t>(n);
    i += n;
    if (in_shard_ == capacity()) DSCORE_RETURN_IF_ERROR(commit_shard());
  }
  return Status::Ok();
}

Result<std::vector<std::string>> TokenShardWriter::finish() {
  if (shard_ && in_shard_ > 0) DSCORE_RETURN_IF_ERROR(commit_shard());
  shard_.reset();  // an empty shard's temporary is removed
  return written_;
}

}  // namespace dscore::data
