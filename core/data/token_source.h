// The "text" and "tokens" data sources: samples of T+1 consecutive tokens
// (T = the model's block size) read from the data files, in an order
// that is a function of (seed, sample index) alone. Shard s of n_s tokens
// gives floor((n_s - 1) / T) chunks, chunk k starting at token k*T (llm.c's
// one-token overlap); chunks are numbered across shards in order.
#pragma once

#include <cstdint>
#include <memory>

#include "core/base/status.h"
#include "core/config/training_config.h"
#include "core/data/permutation.h"
#include "core/data/source.h"
#include "core/model/model.h"

namespace dscore::data {

// Which chunk global sample index i reads: epoch e = i / N, j = i % N, chunk
// = shuffle ? P_{seed,e}(j) : j, with P a keyed permutation of [0, N). Every
// epoch visits every chunk exactly once.
class SampleOrder {
 public:
  SampleOrder(int64_t chunk_count, uint64_t seed, bool shuffle);
  int64_t chunk_of(int64_t sample) const;

 private:
  int64_t chunk_count_;
  uint64_t seed_;
  bool shuffle_;
};

// data.type "text" / "tokens". Checks that the model is a token model (one
// int32 input "tokens" of shape [T+1]), opens and validates every file of
// data.path, checks tokens against the model section's "vocab_size" (when
// given) and that the data holds at least one global batch
// (train_batch_size chunks). The returned source's fill() is thread-safe.
Result<std::unique_ptr<BatchSource>> make_token_source(const config::TrainingConfig& cfg,
                                                       const Model& model);

}  // namespace dscore::data
