// Generation of many sequences at once, as continuous batching: up to
// `slots` sequences decode together, each step prefilling the prompts that
// just joined and decoding one token of every other running sequence; a
// sequence leaves at an end-of-sequence token or its max_new_tokens, and a
// waiting one takes its slot at the next step. With a model that has
// KV-cached generation (model.h decode) a step runs only the new tokens
// against the cache; without, each sequence runs a forward over its last
// block_size tokens (TokenForward). Past block_size tokens a sequence
// slides as without the cache: its last block_size tokens are prefilled
// again at each step.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/app/generation.h"
#include "core/app/sampling.h"
#include "core/base/status.h"
#include "core/engine/engine.h"

namespace dscore {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // not empty; ids < the vocabulary
  int64_t max_new_tokens = 200;
  SamplingOptions sampling;
  std::vector<int32_t> stop_tokens;  // end-of-sequence ids
};

// A token one step made for a sequence; `finished` on its last, with the
// reason ("stop": a stop token, which is in `token`; "length":
// max_new_tokens).
struct GenerationEvent {
  int64_t id = 0;
  int32_t token = -1;  // -1: none (max_new_tokens 0)
  bool finished = false;
  std::string finish_reason;
};

class BatchGenerator {
 public:
  enum class CacheMode { kAuto, kOff };
  // kAuto: the KV cache where the model has one (else, with the reason
  // logged, forward passes); kOff: forward passes.
  static Result<std::unique_ptr<BatchGenerator>> create(Engine& engine, int64_t block_size,
                                                        int64_t vocab_size, int64_t slots,
                                                        CacheMode mode = CacheMode::kAuto);
  // Whether steps decode against a KV cache.
  bool cached() const { return cache_ != nullptr; }

  // Queues a sequence; its id (0, 1, ... in order). INVALID_ARGUMENT for an
  // empty prompt or a token outside the vocabulary.
  Result<int64_t> add(GenerationRequest request);
  // Drops a sequence, running or waiting (a client gone).
  void cancel(int64_t id);
  bool idle() const { return running_.empty() && waiting_.empty(); }
  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }

  // One step: each running sequence's next token (waiting ones join first
  // where a slot is free), in the order of their ids.
  Result<std::vector<GenerationEvent>> step();

 private:
  struct Sequence {
    int64_t id = 0;
    GenerationRequest request;
    std::vector<int32_t> tokens;  // prompt and generated
    int64_t generated = 0;
    int32_t slot = -1;
    int64_t cached = 0;  // of `tokens`, in the slot's cache from position 0
    std::mt19937_64 rng;
  };
  BatchGenerator(Engine& engine, int64_t block_size, int64_t vocab_size, int64_t slots)
      : engine_(engine), block_size_(block_size), vocab_size_(vocab_size), slots_(slots) {}
  Status cached_logits(std::vector<std::vector<float>>* logits);
  Status forward_logits(std::vector<std::vector<float>>* logits);

  Engine& engine_;
  int64_t block_size_, vocab_size_, slots_;
  std::unique_ptr<Model::DecodeCache> cache_;
  std::unique_ptr<TokenForward> forward_;
  std::vector<int32_t> free_slots_;
  std::vector<Sequence> running_;
  std::deque<Sequence> waiting_;
  int64_t next_id_ = 0;
};

}  // namespace dscore
