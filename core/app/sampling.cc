#include "core/app/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dscore {

void apply_repetition_penalty(std::vector<float>* logits, const std::vector<int32_t>& sequence,
                              double penalty) {
  if (penalty == 1.0) return;
  std::vector<bool> seen(logits->size(), false);
  for (int32_t t : sequence) {
    if (t < 0 || static_cast<size_t>(t) >= logits->size() || seen[static_cast<size_t>(t)]) continue;
    seen[static_cast<size_t>(t)] = true;
    float& v = (*logits)[static_cast<size_t>(t)];
    v = v < 0 ? static_cast<float>(v * penalty) : static_cast<float>(v / penalty);
  }
}

std::vector<double> sampling_distribution(const std::vector<float>& logits,
                                          const SamplingOptions& options) {
  const size_t V = logits.size();
  std::vector<double> scaled(V);
  for (size_t i = 0; i < V; ++i) scaled[i] = static_cast<double>(logits[i]) / options.temperature;
  std::vector<bool> removed(V, false);
  if (options.top_k > 0 && static_cast<size_t>(options.top_k) < V) {
    // Below the k-th largest value (ties with it kept).
    std::vector<double> sorted = scaled;
    std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(),
                     std::greater<>());
    const double kth = sorted[static_cast<size_t>(options.top_k - 1)];
    for (size_t i = 0; i < V; ++i) removed[i] = scaled[i] < kth;
  }
  const auto softmax = [&] {
    double max_value = -INFINITY;
    for (size_t i = 0; i < V; ++i)
      if (!removed[i]) max_value = std::max(max_value, scaled[i]);
    std::vector<double> p(V, 0.0);
    double sum = 0;
    for (size_t i = 0; i < V; ++i)
      if (!removed[i]) sum += p[i] = std::exp(scaled[i] - max_value);
    for (double& v : p) v /= sum;
    return p;
  };
  std::vector<double> p = softmax();
  if (options.top_p < 1.0) {
    // Ascending; the tokens whose cumulative probability stays <= 1 - top_p
    // go, the most likely one always stays.
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
    double cumulative = 0;
    for (size_t n = 0; n + 1 < V; ++n) {
      cumulative += p[order[n]];
      if (cumulative > 1.0 - options.top_p) break;
      removed[order[n]] = true;
    }
    p = softmax();
  }
  return p;
}

int32_t sample_token(std::vector<float> logits, const SamplingOptions& options,
                     const std::vector<int32_t>& sequence, std::mt19937_64* rng) {
  apply_repetition_penalty(&logits, sequence, options.repetition_penalty);
  if (options.temperature <= 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const std::vector<double> p = sampling_distribution(logits, options);
  std::discrete_distribution<int32_t> pick(p.begin(), p.end());
  return pick(*rng);
}

}  // namespace dscore
