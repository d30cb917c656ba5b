// A batch's "tokens" tensor, (B, T + 1) int32, split into the model's
// inputs (the first T) and targets (the last T). A token id of -1 is
// padding: it embeds as token 0, is not a target, and marks where a
// sample's text ends (generation sends prompts shorter than T this way).
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/counter_rng.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "sequence_parallel.h"

namespace dscore::transformer {

struct SplitTokens {
  int64_t batch = 0;
  std::vector<int32_t> inputs;         // (B, T)
  std::vector<int32_t> targets;        // (B, T), -1 = not counted
  std::vector<int64_t> last_position;  // per sample: the last input position that is not padding
  // The targets counted in the whole samples: under sequence parallelism
  // inputs and targets are this rank's slice (B, T / sp), and its loss is
  // its share of the mean over the whole sequence.
  int64_t counted_targets = 0;
  // Per sample: a hash of its whole row of tokens (MoE noise draws by it:
  // moe/noise.h).
  std::vector<uint64_t> sample_keys;
};

// `model` (a model type, "gpt") opens the error messages; `slice`: the
// part of each sample this rank computes (all of it by default).
inline SplitTokens split_tokens(const dscore_batch* batch, int64_t block_size, int64_t vocab_size,
                                const std::string& model, SequenceSlice slice = {}) {
  if (batch == nullptr || batch->batch_size <= 0 || batch->count < 1 || batch->tensors == nullptr)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     model + ": the batch is empty; it needs the \"tokens\" input");
  const dscore_tensor* t = batch->tensors[0];
  const int64_t B = batch->batch_size, width = block_size + 1;
  if (t == nullptr || t->data == nullptr || t->dtype != DSCORE_DTYPE_I32 || t->numel != B * width ||
      (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST))
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, model + ": \"tokens\" must be host int32 of shape (" +
                                                  std::to_string(B) + ", " + std::to_string(width) +
                                                  ") (block_size + 1 tokens per sample)");
  const int32_t* tok = static_cast<const int32_t*>(t->data);
  SplitTokens s;
  s.batch = B;
  s.inputs.resize(static_cast<size_t>(B * block_size));
  s.targets.resize(static_cast<size_t>(B * block_size));
  s.last_position.assign(static_cast<size_t>(B), 0);
  s.sample_keys.assign(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    uint64_t& key = s.sample_keys[static_cast<size_t>(b)];
    for (int64_t i = 0; i < width; ++i) {
      const int32_t id = tok[b * width + i];
      key = sdk::splitmix64(key ^ static_cast<uint32_t>(id));
      if (id < -1 || id >= vocab_size)
        throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                         model + ": token id " + std::to_string(id) + " (sample " +
                             std::to_string(b) + ", position " + std::to_string(i) +
                             ") is outside [0, vocab_size " + std::to_string(vocab_size) +
                             "); -1 is the only padding id");
    }
    for (int64_t i = 0; i < block_size; ++i) {
      const int32_t x = tok[b * width + i], y = tok[b * width + i + 1];
      s.inputs[static_cast<size_t>(b * block_size + i)] = x;
      s.targets[static_cast<size_t>(b * block_size + i)] = x < 0 ? -1 : y;
      if (x >= 0) s.last_position[static_cast<size_t>(b)] = i;
      if (x >= 0 && y >= 0) s.counted_targets += 1;
    }
  }
  if (slice.split()) {
    const int64_t Tl = slice.local(), t0 = slice.first();
    std::vector<int32_t> inputs(static_cast<size_t>(B * Tl)), targets(inputs.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Tl; ++i) {
        inputs[static_cast<size_t>(b * Tl + i)] =
            s.inputs[static_cast<size_t>(b * block_size + t0 + i)];
        targets[static_cast<size_t>(b * Tl + i)] =
            s.targets[static_cast<size_t>(b * block_size + t0 + i)];
      }
    s.inputs = std::move(inputs);
    s.targets = std::move(targets);
  }
  return s;
}

}  // namespace dscore::transformer
