#include "core/app/batch_generator.h"

#include <algorithm>

#include "core/base/logging.h"
#include "core/tensor/tensor_view.h"

namespace dscore {

Result<std::unique_ptr<BatchGenerator>> BatchGenerator::create(Engine& engine, int64_t block_size,
                                                               int64_t vocab_size, int64_t slots,
                                                               CacheMode mode) {
  if (slots < 1) return invalid_argument("generation needs at least one slot");
  std::unique_ptr<BatchGenerator> g(new BatchGenerator(engine, block_size, vocab_size, slots));
  for (int32_t s = static_cast<int32_t>(slots) - 1; s >= 0; --s) g->free_slots_.push_back(s);
  if (mode == CacheMode::kAuto) {
    auto cache = engine.decode_cache(slots, block_size);
    if (cache.ok()) {
      g->cache_ = std::move(*cache);
    } else if (cache.status().code() == DSCORE_UNIMPLEMENTED) {
      log_info(
          "generating without a KV cache (a forward pass over each sequence's last "
          "block_size tokens per token): " +
          cache.status().message());
    } else {
      return cache.status();
    }
  }
  if (!g->cache_) {
    DSCORE_ASSIGN_OR_RETURN(TokenForward forward,
                            TokenForward::create(engine, block_size, vocab_size));
    g->forward_ = std::make_unique<TokenForward>(std::move(forward));
  }
  return g;
}

Result<int64_t> BatchGenerator::add(GenerationRequest request) {
  if (request.prompt.empty())
    return invalid_argument("the prompt is empty: give at least one token");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= vocab_size_)
      return invalid_argument("prompt token " + std::to_string(t) +
                              " is outside the model's vocabulary of " +
                              std::to_string(vocab_size_));
  if (request.max_new_tokens < 0) return invalid_argument("max_new_tokens must be >= 0");
  Sequence s;
  s.id = next_id_++;
  s.tokens = request.prompt;
  s.rng.seed(request.sampling.seed);
  s.request = std::move(request);
  waiting_.push_back(std::move(s));
  return waiting_.back().id;
}

void BatchGenerator::cancel(int64_t id) {
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->id == id) {
      free_slots_.push_back(it->slot);
      running_.erase(it);
      return;
    }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if (it->id == id) {
      waiting_.erase(it);
      return;
    }
}

Result<std::vector<GenerationEvent>> BatchGenerator::step() {
  std::vector<GenerationEvent> events;
  while (!waiting_.empty() && !free_slots_.empty()) {
    Sequence s = std::move(waiting_.front());
    waiting_.pop_front();
    if (s.request.max_new_tokens == 0) {  // nothing to generate
      events.push_back({s.id, -1, true, "length"});
      continue;
    }
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    s.cached = 0;
    running_.push_back(std::move(s));
  }
  if (running_.empty()) return events;
  std::vector<std::vector<float>> logits;
  DSCORE_RETURN_IF_ERROR(cache_ ? cached_logits(&logits) : forward_logits(&logits));
  std::vector<Sequence> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = running_[i];
    const int32_t next = sample_token(std::move(logits[i]), s.request.sampling, s.tokens, &s.rng);
    s.tokens.push_back(next);
    s.generated += 1;
    GenerationEvent e{s.id, next, false, ""};
    const auto& stops = s.request.stop_tokens;
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      e.finished = true, e.finish_reason = "stop";
    } else if (s.generated >= s.request.max_new_tokens) {
      e.finished = true, e.finish_reason = "length";
    }
    events.push_back(e);
    if (e.finished)
      free_slots_.push_back(s.slot);
    else
      still.push_back(std::move(s));
  }
  running_ = std::move(still);
  std::sort(events.begin(), events.end(),
            [](const GenerationEvent& a, const GenerationEvent& b) { return a.id < b.id; });
  return events;
}

Status BatchGenerator::cached_logits(std::vector<std::vector<float>>* logits) {
  std::vector<int32_t> slots, tokens;
  std::vector<int64_t> positions, lengths;
  for (Sequence& s : running_) {
    const int64_t total = static_cast<int64_t>(s.tokens.size());
    // Within the window: the tokens not cached yet after the cached ones;
    // past it: the last block_size tokens again from position 0.
    const int64_t position = total <= block_size_ ? s.cached : 0;
    const int64_t first = total <= block_size_ ? s.cached : total - block_size_;
    slots.push_back(s.slot);
    positions.push_back(position);
    lengths.push_back(total - first);
    tokens.insert(tokens.end(), s.tokens.begin() + first, s.tokens.end());
    s.cached = total <= block_size_ ? total : 0;
  }
  const dscore_decode_batch batch{sizeof(dscore_decode_batch),
                                  running_.size(),
                                  slots.data(),
                                  positions.data(),
                                  lengths.data(),
                                  tokens.data()};
  const int64_t count = static_cast<int64_t>(running_.size());
  std::vector<float> all(static_cast<size_t>(count * vocab_size_));
  const std::vector<int64_t> shape = {count, vocab_size_};
  dscore_tensor out = tensor::host_view(all.data(), DSCORE_DTYPE_F32, shape, count * vocab_size_);
  DSCORE_RETURN_IF_ERROR(engine_.decode(*cache_, batch, &out));
  logits->clear();
  for (int64_t i = 0; i < count; ++i)
    logits->emplace_back(all.begin() + i * vocab_size_, all.begin() + (i + 1) * vocab_size_);
  return Status::Ok();
}

Status BatchGenerator::forward_logits(std::vector<std::vector<float>>* logits) {
  logits->clear();
  std::vector<int32_t> window;
  for (const Sequence& s : running_) {
    const size_t length = std::min(s.tokens.size(), static_cast<size_t>(block_size_));
    window.assign(s.tokens.end() - static_cast<std::ptrdiff_t>(length), s.tokens.end());
    DSCORE_RETURN_IF_ERROR(forward_->run(window));
    logits->push_back(forward_->logits());
  }
  return Status::Ok();
}

}  // namespace dscore
