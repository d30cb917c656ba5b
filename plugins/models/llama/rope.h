// Rotary position embeddings as transformers' Llama computes them:
// inv_freq_i = 1 / theta^(2i / head_dim) for i < head_dim / 2, rescaled by
// Llama 3's rope_scaling (transformers' _compute_llama3_parameters:
// wavelengths longer than original_max_position_embeddings /
// low_freq_factor are divided by `factor`, those shorter than
// original_max_position_embeddings / high_freq_factor kept, the ones
// between blended), and position t's angle t * inv_freq_i.
#pragma once

#include <cstdint>
#include <vector>

#include "llama_config.h"

namespace dscore::llama {

// (head_dim / 2) inverse frequencies, in double.
std::vector<double> rope_inv_freq(const LlamaConfig& config);

// cos and sin (T, head_dim / 2) of t * inv_freq[i], computed in double.
template <typename T>
void rope_tables(T* cos_out, T* sin_out, const std::vector<double>& inv_freq, int64_t Tn);

}  // namespace dscore::llama
