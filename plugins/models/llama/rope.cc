#include "rope.h"

#include <cmath>
#include <numbers>

namespace dscore::llama {

std::vector<double> rope_inv_freq(const LlamaConfig& config) {
  const int64_t half = config.head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] =
        1.0 / std::pow(config.rope_theta,
                       static_cast<double>(2 * i) / static_cast<double>(config.head_dim));
  const RopeScaling& s = config.rope_scaling;
  if (!s.llama3) return inv_freq;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else if (!(wavelen < high_freq_wavelen)) {  // medium: blend scaled and unscaled
      const double smooth =
          (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv_freq;
}

template <typename T>
void rope_tables(T* cos_out, T* sin_out, const std::vector<double>& inv_freq, int64_t Tn) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * inv_freq[static_cast<size_t>(i)];
      cos_out[t * half + i] = static_cast<T>(std::cos(angle));
      sin_out[t * half + i] = static_cast<T>(std::sin(angle));
    }
}

template void rope_tables<float>(float*, float*, const std::vector<double>&, int64_t);
template void rope_tables<double>(double*, double*, const std::vector<double>&, int64_t);

}  // namespace dscore::llama
