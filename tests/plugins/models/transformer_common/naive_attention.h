// A plain causal softmax attention in double, the reference of the
// attention tests (attention_test.cc, attention_bf16_test.cc): query head h
// reads key/value head h / (NH / NKV) (transformers' repeat_kv), with the
// layouts of transformer_common/cpu/attention.h. Writes out (B, T) rows of
// stride out_ld (zero outside the heads) and lse (B, NH, T).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "transformer_common/cpu/attention.h"

namespace dscore::transformer::testing {

inline void naive_attention(std::vector<double>* out, std::vector<double>* lse, const float* q_all,
                            const float* k_all, const float* v_all, const cpu::AttentionShape& s) {
  const int64_t hd = s.head_dim, group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  out->assign(static_cast<size_t>(s.B * s.Tn * s.out_ld), 0.0);
  lse->assign(static_cast<size_t>(s.B * s.NH * s.Tn), 0.0);
  std::vector<double> score(static_cast<size_t>(s.Tn));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.Tn; ++t) {
        const float* q = q_all + (b * s.Tn + t) * s.q_ld + h * hd;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t u = 0; u <= t; ++u) {
          const float* k = k_all + (b * s.Tn + u) * s.kv_ld + (h / group) * hd;
          double d = 0;
          for (int64_t c = 0; c < hd; ++c) d += static_cast<double>(q[c]) * k[c];
          score[static_cast<size_t>(u)] = d * scale;
          mx = std::max(mx, d * scale);
        }
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) sum += std::exp(score[static_cast<size_t>(u)] - mx);
        double* o = out->data() + (b * s.Tn + t) * s.out_ld + h * hd;
        for (int64_t u = 0; u <= t; ++u) {
          const double p = std::exp(score[static_cast<size_t>(u)] - mx) / sum;
          const float* v = v_all + (b * s.Tn + u) * s.kv_ld + (h / group) * hd;
          for (int64_t c = 0; c < hd; ++c) o[c] += p * v[c];
        }
        (*lse)[static_cast<size_t>((b * s.NH + h) * s.Tn + t)] = mx + std::log(sum);
      }
}

}  // namespace dscore::transformer::testing
