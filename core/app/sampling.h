// Picking the next token from a model's logits as transformers' generate()
// does: the repetition penalty (RepetitionPenaltyLogitsProcessor) over the
// sequence so far, then, when sampling, the temperature, top-k and top-p
// warpers in that order (TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper) and a draw from the softmax of what is left; greedy
// (temperature 0) takes the argmax after the penalty.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace dscore {

struct SamplingOptions {
  double temperature = 0.8;         // 0 = greedy (argmax)
  int64_t top_k = 0;                // keep the k most likely tokens (ties kept); 0 = all
  double top_p = 1.0;               // keep the smallest set whose probability reaches top_p
  double repetition_penalty = 1.0;  // > 1 discourages tokens already in the sequence
  uint64_t seed = 1337;
};

// The penalty on the logits of every token in `sequence`: a positive logit
// divided by `penalty`, a negative one multiplied (each token once).
void apply_repetition_penalty(std::vector<float>* logits, const std::vector<int32_t>& sequence,
                              double penalty);

// The distribution sampling draws from, after the temperature, top-k and
// top-p (options.temperature > 0): one probability per token, 0 for those
// the warpers removed.
std::vector<double> sampling_distribution(const std::vector<float>& logits,
                                          const SamplingOptions& options);

// The next token: the penalty over `sequence`, then the argmax (greedy) or
// a draw from sampling_distribution with `rng`.
int32_t sample_token(std::vector<float> logits, const SamplingOptions& options,
                     const std::vector<int32_t>& sequence, std::mt19937_64* rng);

}  // namespace dscore
