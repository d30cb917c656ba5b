// Where micro-batches come from. The synthetic source asks the model for its
// own deterministic task; the file sources (text, llm.c token shards:
// token_source.h) read token sequences from files, never whole. In both a
// sample is a function of the seed and its global index alone.
#pragma once

#include <memory>

#include "core/base/status.h"
#include "core/config/training_config.h"
#include "core/data/batch.h"
#include "core/data/sampler.h"
#include "core/model/model.h"

namespace dscore::data {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fill `batch` (batch_size == range.count) with samples of `range`.
  virtual Status fill(SampleRange range, HostBatch* batch) = 0;
};

// The source cfg.data asks for (reading also cfg.seed, cfg.batch and the
// model section's "vocab_size"). Fails with a message naming the data
// section or file and the fix when the model or the data cannot provide it.
Result<std::unique_ptr<BatchSource>> make_batch_source(const config::TrainingConfig& cfg,
                                                       const Model& model);

}  // namespace dscore::data
