// Sampling as transformers' logits processors compute it, on fixed logits:
// the repetition penalty, temperature, top-k (ties at the k-th value kept),
// top-p (the smallest set reaching p; the most likely token always kept),
// and draws that follow the distribution.
#include "core/app/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dscore {
namespace {

std::vector<double> softmax(const std::vector<double>& x) {
  double max_value = -INFINITY, sum = 0;
  for (double v : x) max_value = std::max(max_value, v);
  std::vector<double> p;
  for (double v : x) sum += std::exp(v - max_value);
  for (double v : x) p.push_back(std::exp(v - max_value) / sum);
  return p;
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  apply_repetition_penalty(&logits, {0, 1, 0, 1}, 2.0);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
}

TEST(Sampling, TemperatureScalesTheSoftmax) {
  SamplingOptions o;
  o.temperature = 0.5;
  const std::vector<double> p = sampling_distribution({1.0f, 2.0f, 0.0f}, o);
  const std::vector<double> want = softmax({2.0, 4.0, 0.0});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(p[i], want[i], 1e-12);
}

TEST(Sampling, TopKKeepsTiesWithTheKthValue) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_k = 2;
  const std::vector<double> p = sampling_distribution({1.0f, 3.0f, 1.0f, 0.0f}, o);
  const std::vector<double> kept = softmax({1.0, 3.0, 1.0});
  EXPECT_NEAR(p[0], kept[0], 1e-12);
  EXPECT_NEAR(p[1], kept[1], 1e-12);
  EXPECT_NEAR(p[2], kept[2], 1e-12);
  EXPECT_EQ(p[3], 0.0);
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (logits their logs).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_p = 0.8;  // 0.05 + 0.15 = 0.2 <= 1 - 0.8 go; 0.5 + 0.3 stay
  std::vector<double> p = sampling_distribution(logits, o);
  EXPECT_NEAR(p[0], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(p[1], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(p[2], 0.0);
  EXPECT_EQ(p[3], 0.0);
  o.top_p = 0.81;  // 0.2 > 0.19: 0.15 stays
  p = sampling_distribution(logits, o);
  EXPECT_GT(p[2], 0.0);
  EXPECT_EQ(p[3], 0.0);
  o.top_p = 0.01;  // the most likely token alone
  p = sampling_distribution(logits, o);
  EXPECT_NEAR(p[0], 1.0, 1e-12);
}

TEST(Sampling, GreedyTakesTheArgmaxAfterThePenaltyAndDrawsFollowTheDistribution) {
  SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.repetition_penalty = 4.0;
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token({1.0f, 3.0f, 2.0f}, greedy, {}, &rng), 1);
  EXPECT_EQ(sample_token({1.0f, 3.0f, 2.0f}, greedy, {1}, &rng), 2);  // 3 / 4 < 2
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_k = 3;
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -5.0f};
  const std::vector<double> p = sampling_distribution(logits, o);
  std::vector<int> counts(4, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) counts[static_cast<size_t>(sample_token(logits, o, {}, &rng))]++;
  EXPECT_EQ(counts[3], 0);
  for (size_t i = 0; i < 3; ++i)  // 5 standard deviations
    EXPECT_NEAR(counts[i] / static_cast<double>(draws), p[i],
                5 * std::sqrt(p[i] * (1 - p[i]) / draws));
}

}  // namespace
}  // namespace dscore
