// KV-cached generation for the decoder models (model.h decode): one
// decode() call's sequences as packed rows, and the cache the models keep
// their attention's keys and values in, in their backend's memory.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/model_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dscore::transformer {

// One sequence of a decode() call: its slot, the position of its first new
// token, its new tokens and where they start among the call's rows.
struct DecodeSequence {
  int32_t slot = 0;
  int64_t position = 0;
  int64_t length = 0;
  int64_t first_row = 0;
  int64_t last_row() const { return first_row + length - 1; }
};

// The call's sequences (the batch checked by sdk::checked_decode_batch),
// their tokens checked against the vocabulary.
struct DecodeRows {
  std::vector<DecodeSequence> sequences;
  std::vector<int32_t> tokens;  // every sequence's new tokens, in order
  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
  int64_t count() const { return static_cast<int64_t>(sequences.size()); }

  static DecodeRows of(const dscore_decode_batch& batch, int64_t vocab_size, const char* model) {
    DecodeRows out;
    for (size_t i = 0; i < batch.count; ++i) {
      out.sequences.push_back({batch.slots[i], batch.positions[i], batch.lengths[i], out.rows()});
      for (int64_t t = 0; t < batch.lengths[i]; ++t) {
        const int32_t token = batch.tokens[out.rows()];
        if (token < 0 || token >= vocab_size)
          throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                           std::string(model) + " decode: token " + std::to_string(token) +
                               " is outside the vocabulary of " + std::to_string(vocab_size));
        out.tokens.push_back(token);
      }
    }
    return out;
  }
};

// decode()'s logits: host fp32 of (count, vocab_size).
inline float* decode_logits(dscore_tensor* logits, int64_t count, int64_t vocab_size,
                            const char* model) {
  if (logits == nullptr || logits->data == nullptr || logits->dtype != DSCORE_DTYPE_F32 ||
      logits->numel != count * vocab_size ||
      (logits->device_type != DSCORE_DEVICE_CPU && logits->device_type != DSCORE_DEVICE_CUDA_HOST))
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string(model) +
                         " decode: logits must be host fp32 of (count, vocab) = (" +
                         std::to_string(count) + ", " + std::to_string(vocab_size) + ")");
  return static_cast<float*>(logits->data);
}

// What a KvCache of `scalar_bytes` values takes.
inline uint64_t kv_cache_bytes(int64_t layers, int64_t slots, int64_t max_positions, int64_t width,
                               uint64_t scalar_bytes) {
  return 2 * static_cast<uint64_t>(layers * slots * max_positions * width) * scalar_bytes;
}

// For each of `layers` attention layers and each slot, max_positions rows
// of keys and as many of values, `width` wide (the key/value heads times
// head_dim), in the backend's buffers (a host backend's count as the
// model's activations).
template <class Backend>
class KvCache final : public sdk::DecodeCache {
 public:
  using T = typename Backend::Scalar;

  KvCache(Backend& backend, int64_t layers, int64_t slots, int64_t max_positions, int64_t width)
      : sdk::DecodeCache(slots, max_positions),
        width_(width),
        keys_(backend.template alloc<T>(elements(layers, slots, max_positions, width))),
        values_(backend.template alloc<T>(elements(layers, slots, max_positions, width))) {}

  int64_t width() const { return width_; }
  // Layer l's keys (values) of the slot, from position 0.
  T* keys(int64_t layer, int32_t slot) const { return keys_.get() + offset(layer, slot); }
  T* values(int64_t layer, int32_t slot) const { return values_.get() + offset(layer, slot); }

 private:
  static int64_t elements(int64_t layers, int64_t slots, int64_t max_positions, int64_t width) {
    return layers * slots * max_positions * width;
  }
  int64_t offset(int64_t layer, int32_t slot) const {
    return (layer * slots() + slot) * max_positions() * width_;
  }
  int64_t width_;
  typename Backend::template Buffer<T> keys_, values_;
};

// The cache's limits for a model of `context` positions: OUT_OF_RANGE past
// the context; UNIMPLEMENTED for a sequence- or expert-parallel instance
// (`split`; generation runs those on one rank, their files hold whole
// tensors).
inline void check_cache_request(int64_t max_positions, int64_t context, bool split,
                                const char* model) {
  if (max_positions > context)
    throw sdk::Error(DSCORE_OUT_OF_RANGE,
                     std::string(model) + ": a KV cache of " + std::to_string(max_positions) +
                         " positions exceeds the model's context of " + std::to_string(context));
  if (split)
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     std::string(model) +
                         ": KV-cached generation of a sequence- or expert-parallel instance is "
                         "not supported; generate on one rank or tensor-parallel");
}

}  // namespace dscore::transformer
