// Token-sequence samples from text files and llm.c shards (token_source.h):
// the model check, the dataset's chunk table and the per-sample mapping.
#include "core/data/token_source.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/data/token_file.h"

namespace dscore::data {
namespace {

constexpr char kTokensInput[] = "tokens";

std::string describe_inputs(const dscore_model_description& d) {
  if (d.input_count == 0) return "no inputs";
  std::vector<std::string> parts;
  for (size_t i = 0; i < d.input_count; ++i) {
    const dscore_model_input& in = *d.inputs[i];
    std::vector<std::string> dims;
    for (int32_t k = 0; k < in.ndim; ++k) dims.push_back(std::to_string(in.shape[k]));
    parts.push_back(std::string("\"") + (in.name ? in.name : "") + "\" (" +
                    sdk::dtype_name(in.dtype) + ", [" + join(dims, ", ") + "])");
  }
  return (d.input_count == 1 ? "the input " : "the inputs ") + join(parts, ", ");
}

struct TokenInput {
  size_t index = 0;
  int64_t block_size = 0;  // T: a sample holds T+1 tokens
};

Result<TokenInput> find_token_input(const Model& model, const std::string& type) {
  const dscore_model_description& d = model.description();
  if (d.input_count == 1) {
    const dscore_model_input& in = *d.inputs[0];
    if (in.name && std::strcmp(in.name, kTokensInput) == 0 && in.dtype == DSCORE_DTYPE_I32 &&
        in.ndim == 1 && in.shape[0] >= 2)
      return TokenInput{0, in.shape[0] - 1};
  }
  return invalid_argument(
      "data.type \"" + type +
      "\" needs a token model: exactly one input \"tokens\" of int32 with shape "
      "[block_size + 1], block_size >= 1; " +
      model.display_name() + " declares " + describe_inputs(d) +
      ". Use a token model (e.g. model.type \"gpt\") or data.type \"synthetic\"");
}

// The model section's "vocab_size" as written; absent (or not an integer,
// e.g. "auto") means no vocabulary check.
std::optional<int64_t> configured_vocab_size(const config::TrainingConfig& cfg) {
  if (!cfg.model || !cfg.model->params.is_object()) return std::nullopt;
  const json::Value* v = cfg.model->params.find("vocab_size");
  if (!v || !v->is_integral()) return std::nullopt;
  return v->as_int();
}

// The files of data.path with their chunk table; immutable once built.
class TokenDataset {
 public:
  TokenDataset(std::vector<TokenFile> files, int64_t block_size)
      : files_(std::move(files)), block_(block_size) {
    chunk_starts_.push_back(0);
    for (const TokenFile& f : files_)
      chunk_starts_.push_back(chunk_starts_.back() + (f.token_count() - 1) / block_);
  }

  int64_t chunk_count() const { return chunk_starts_.back(); }
  int64_t block_size() const { return block_; }
  const std::vector<TokenFile>& files() const { return files_; }
  int64_t token_count() const {
    int64_t n = 0;
    for (const TokenFile& f : files_) n += f.token_count();
    return n;
  }

  // Chunk c's T+1 tokens into out; fails when its file changed since open.
  Status read_chunk(int64_t c, int32_t* out) const {
    DSCORE_CHECK(c >= 0 && c < chunk_count(), "chunk out of range");
    // Last shard whose first chunk is <= c (shards without chunks share a
    // start with the next one, which upper_bound skips past).
    const auto it = std::upper_bound(chunk_starts_.begin(), chunk_starts_.end(), c);
    const auto shard = static_cast<size_t>(it - chunk_starts_.begin() - 1);
    return files_[shard].copy((c - chunk_starts_[shard]) * block_, block_ + 1, out);
  }

 private:
  std::vector<TokenFile> files_;
  int64_t block_;
  std::vector<int64_t> chunk_starts_;  // (files + 1): first chunk of each file, then the total
};

class TokenSource final : public BatchSource {
 public:
  TokenSource(TokenDataset dataset, size_t input_index, uint64_t seed, bool shuffle)
      : dataset_(std::move(dataset)),
        input_index_(input_index),
        order_(dataset_.chunk_count(), seed, shuffle) {}

  Status fill(SampleRange range, HostBatch* batch) override {
    DSCORE_CHECK(batch->batch_size() == range.count, "batch size mismatch");
    const int64_t width = dataset_.block_size() + 1;
    dscore_tensor& t = batch->tensor(input_index_);
    DSCORE_CHECK(t.dtype == DSCORE_DTYPE_I32 && t.numel == range.count * width,
                 "tokens tensor shape mismatch");
    auto* out = static_cast<int32_t*>(t.data);  // (batch, T+1)
    for (int64_t b = 0; b < range.count; ++b)
      DSCORE_RETURN_IF_ERROR(
          dataset_.read_chunk(order_.chunk_of(range.first + b), out + b * width));
    return Status::Ok();
  }

 private:
  TokenDataset dataset_;
  size_t input_index_;
  SampleOrder order_;
};

}  // namespace

SampleOrder::SampleOrder(int64_t chunk_count, uint64_t seed, bool shuffle)
    : chunk_count_(chunk_count), seed_(seed), shuffle_(shuffle) {
  DSCORE_CHECK(chunk_count > 0, "a dataset without chunks");
}

int64_t SampleOrder::chunk_of(int64_t sample) const {
  DSCORE_CHECK(sample >= 0, "negative sample index");
  const int64_t epoch = sample / chunk_count_;
  const int64_t j = sample % chunk_count_;
  if (!shuffle_) return j;
  // A fresh key per (seed, epoch): each epoch is a different order.
  const IndexPermutation perm(static_cast<uint64_t>(chunk_count_),
                              splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(epoch)));
  return static_cast<int64_t>(perm(static_cast<uint64_t>(j)));
}

Result<std::unique_ptr<BatchSource>> make_token_source(const config::TrainingConfig& cfg,
                                                       const Model& model) {
  const config::DataConfig& data = cfg.data;
  DSCORE_CHECK(data.type == "text" || data.type == "tokens", "not a token data type");
  const TokenFormat format = data.type == "text" ? TokenFormat::kBytes : TokenFormat::kLlmcShard;
  DSCORE_ASSIGN_OR_RETURN(const TokenInput input, find_token_input(model, data.type));
  DSCORE_ASSIGN_OR_RETURN(const std::vector<std::string> paths, expand_data_path(data.path));

  const std::optional<int64_t> vocab = configured_vocab_size(cfg);
  std::vector<TokenFile> files;
  for (const std::string& path : paths) {
    DSCORE_ASSIGN_OR_RETURN(TokenFile file, TokenFile::open(path, format));
    if (vocab) DSCORE_RETURN_IF_ERROR(file.check_vocab(*vocab));
    if (file.token_count() - 1 < input.block_size)
      log_warning("data file '" + path + "' has " + std::to_string(file.token_count()) +
                  " tokens, fewer than one sample of " + std::to_string(input.block_size + 1) +
                  "; it contributes no samples");
    files.push_back(std::move(file));
  }
  TokenDataset dataset(std::move(files), input.block_size);

  const int64_t T = input.block_size;
  const int64_t batch = std::max<int64_t>(1, cfg.batch.train_batch_size);
  const int64_t chunks = dataset.chunk_count();
  const std::string files_text =
      paths.size() == 1 ? "" : " (" + std::to_string(paths.size()) + " files)";
  if (chunks < batch)
    return invalid_argument(
        "data.path '" + data.path + "'" + files_text + " holds " +
        std::to_string(dataset.token_count()) + " tokens: " + std::to_string(chunks) +
        " samples of " + std::to_string(T + 1) + " tokens; one global batch needs " +
        std::to_string(batch) + " samples (train_batch_size), i.e. " + std::to_string(batch) +
        " * " + std::to_string(T) + " + 1 = " + std::to_string(batch * T + 1) +
        " tokens. Give more data, or lower train_batch_size or the model's block size "
        "(now " +
        std::to_string(T) + ")");

  log_info("data: " + data.type + " '" + data.path + "'" + files_text + ", " +
           std::to_string(dataset.token_count()) + " tokens, " + std::to_string(chunks) +
           " samples of " + std::to_string(T + 1) + " tokens per epoch, " +
           (data.shuffle ? "shuffled (seed " + std::to_string(cfg.seed) + ")" : "in file order"));
  return std::unique_ptr<BatchSource>(
      new TokenSource(std::move(dataset), input.index, cfg.seed, data.shuffle));
}

}  // namespace dscore::data
