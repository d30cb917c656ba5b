// The decoder models' KV-cached generation (model.h decode) against their
// forward pass: a decoder (llama/decoder.h, gpt/decoder.h) run over several
// sequences at once, with ragged prefills, one token per step after, and a
// slot started afresh, gives at every step each sequence's logits of the
// runner's forward over its whole prefix.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "transformer_common/kv_cache.h"

namespace dscore::transformer::testing {

// forward_logits(prefix): the runner's logits after the prefix (vocab).
using ForwardLogits = std::function<std::vector<float>(const std::vector<int32_t>&)>;

template <class Decoder>
void expect_decode_matches_forward(Decoder& decoder, const dscore_model_hooks& hooks,
                                   int64_t block_size, int64_t vocab,
                                   const std::vector<std::vector<int32_t>>& sequences,
                                   const ForwardLogits& forward_logits, double tolerance) {
  auto cache = decoder.make_cache(static_cast<int64_t>(sequences.size()) + 1, block_size);
  auto& own = dynamic_cast<typename Decoder::Cache&>(*cache);
  // Tokens in the cache per sequence; sequence i prefills 1 + i tokens.
  std::vector<int64_t> done(sequences.size(), 0);
  // Slots in reverse order, so slot and sequence differ.
  const auto slot_of = [&](size_t i) { return static_cast<int32_t>(sequences.size() - i); };
  int checked = 0;
  for (int step = 0;; ++step) {
    std::vector<int32_t> slots, tokens;
    std::vector<int64_t> positions, lengths;
    std::vector<size_t> which;
    for (size_t i = 0; i < sequences.size(); ++i) {
      const int64_t total = static_cast<int64_t>(sequences[i].size());
      if (done[i] >= total) continue;
      const int64_t n = step == 0 ? std::min<int64_t>(total, 1 + static_cast<int64_t>(i)) : 1;
      slots.push_back(slot_of(i));
      positions.push_back(done[i]);
      lengths.push_back(n);
      tokens.insert(tokens.end(), sequences[i].begin() + done[i],
                    sequences[i].begin() + done[i] + n);
      which.push_back(i);
      done[i] += n;
    }
    if (which.empty()) break;
    const dscore_decode_batch batch{sizeof(dscore_decode_batch),
                                    which.size(),
                                    slots.data(),
                                    positions.data(),
                                    lengths.data(),
                                    tokens.data()};
    std::vector<float> logits(which.size() * static_cast<size_t>(vocab));
    decoder.decode(own, DecodeRows::of(batch, vocab, "test"), hooks, logits.data());
    for (size_t j = 0; j < which.size(); ++j) {
      const auto& seq = sequences[which[j]];
      const std::vector<int32_t> prefix(seq.begin(), seq.begin() + done[which[j]]);
      const std::vector<float> want = forward_logits(prefix);
      for (int64_t v = 0; v < vocab; ++v)
        EXPECT_NEAR(logits[j * static_cast<size_t>(vocab) + static_cast<size_t>(v)],
                    want[static_cast<size_t>(v)], tolerance)
            << "sequence " << which[j] << " after " << prefix.size() << " tokens, logit " << v;
      ++checked;
    }
  }
  EXPECT_GT(checked, static_cast<int>(sequences.size()));
  // A slot started afresh (position 0) forgets what it held.
  const std::vector<int32_t> fresh = {2, 1};
  const int32_t slot = slot_of(0);
  const int64_t position = 0, length = 2;
  const dscore_decode_batch batch{
      sizeof(dscore_decode_batch), 1, &slot, &position, &length, fresh.data()};
  std::vector<float> logits(static_cast<size_t>(vocab));
  decoder.decode(own, DecodeRows::of(batch, vocab, "test"), hooks, logits.data());
  const std::vector<float> want = forward_logits(fresh);
  for (int64_t v = 0; v < vocab; ++v)
    EXPECT_NEAR(logits[static_cast<size_t>(v)], want[static_cast<size_t>(v)], tolerance);
}

}  // namespace dscore::transformer::testing
