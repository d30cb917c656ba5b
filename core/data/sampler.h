// Which samples each data-parallel rank reads. The global batch of optimizer
// step s is samples [s*T, (s+1)*T) (T = train_batch_size); micro-batch m of
// rank r is the slice starting at s*T + m*(micro*W) + r*micro. The mapping is
// a function of (step, micro step, rank) only, so a resumed run reads the
// same batches and any world size reads the same global batch.
#pragma once

#include <cstdint>

#include "core/config/training_config.h"

namespace dscore::data {

struct SampleRange {
  int64_t first = 0;  // index of the first sample
  int64_t count = 0;
};

class DistributedSampler {
 public:
  DistributedSampler(const config::BatchConfig& batch, int world_size, int rank)
      : batch_(batch), world_size_(world_size), rank_(rank) {}

  SampleRange micro_batch(int64_t global_step, int64_t micro_step) const {
    const int64_t micro = batch_.train_micro_batch_size_per_gpu;
    return {
        global_step * batch_.train_batch_size + micro_step * micro * world_size_ + rank_ * micro,
        micro};
  }

 private:
  config::BatchConfig batch_;
  int world_size_;
  int rank_;
};

}  // namespace dscore::data
