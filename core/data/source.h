// Where micro-batches come from. The synthetic source asks the model for its
// own deterministic task (samples are a function of seed and index); file
// sources (text, llm.c token shards) arrive with the GPT model.
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

// Fails with a message naming the data section when the model cannot
// provide what the config asks for.
Result<std::unique_ptr<BatchSource>> make_batch_source(const config::DataConfig& data,
                                                       const Model& model, uint64_t seed);

}  // namespace dscore::data
