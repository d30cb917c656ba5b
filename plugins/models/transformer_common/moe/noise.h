// The random draws of MoE gating in training (gating.h GatingNoise), each a
// pure function of (seed, layer, the token's sample, its position, the
// expert): a recomputed block (activation checkpointing) draws the same, a
// resumed run draws what the uninterrupted one would, and a token draws the
// same whichever rank routes it. The sample is named by a hash of its
// tokens (SplitTokens::sample_keys), so a sample seen again draws again the
// same noise.
#pragma once

#include <dscore/cpp/counter_rng.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace dscore::transformer::moe {

// S = B * T tokens, sample b's at rows [b T, (b + 1) T), position `first`
// onwards (a slice of each sample under sequence parallelism).
struct TokenKeys {
  const std::vector<uint64_t>* samples = nullptr;
  int64_t tokens_per_sample = 0;
  int64_t first_position = 0;
  uint64_t key(int64_t token) const {
    return sdk::hash_key((*samples)[static_cast<size_t>(token / tokens_per_sample)],
                         static_cast<uint64_t>(first_position + token % tokens_per_sample),
                         /*"moe"*/ 0x6d6f65);
  }
};

// Uniform in (0, 1) at (seed, stream, token, column): never 0, so a log of
// it is finite.
inline double noise_uniform(uint64_t seed, uint64_t stream, uint64_t token, int64_t column) {
  const uint64_t bits = sdk::hash_key(seed, stream, token, static_cast<uint64_t>(column));
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// rows x columns draws: uniform in [low, high) or standard Gumbel.
enum class Draw { kUniform, kGumbel };
inline std::vector<float> draw_noise(Draw kind, uint64_t seed, uint64_t stream,
                                     const TokenKeys& keys, int64_t rows, int64_t columns,
                                     double low = 0.0, double high = 1.0) {
  std::vector<float> out(static_cast<size_t>(rows * columns));
  for (int64_t s = 0; s < rows; ++s) {
    const uint64_t token = keys.key(s);
    for (int64_t c = 0; c < columns; ++c) {
      const double u = noise_uniform(seed, stream, token, c);
      out[static_cast<size_t>(s * columns + c)] = static_cast<float>(
          kind == Draw::kGumbel ? -std::log(-std::log(u)) : low + (high - low) * u);
    }
  }
  return out;
}

}  // namespace dscore::transformer::moe
