#include "cached_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "parallel.h"

namespace dscore::transformer::cpu {
namespace {

// Eight independent partial sums the compiler vectorises (a single running
// sum is a chain it must keep in order).
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) s[u] += a[c + u] * b[c + u];
  T total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; c < n; ++c) total += a[c] * b[c];
  return total;
}

}  // namespace

template <typename T>
void cached_attention(const std::vector<CachedRows<T>>& sequences,
                      const CachedAttentionShape& shape) {
  // (sequence, row) of every new row, in order.
  std::vector<std::pair<size_t, int64_t>> rows;
  int64_t longest = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    for (int64_t r = 0; r < sequences[s].rows; ++r) rows.emplace_back(s, r);
    longest = std::max(longest, sequences[s].position + sequences[s].rows);
  }
  const int64_t NH = shape.NH, hd = shape.head_dim, group = NH / shape.NKV;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hd));
  const int64_t tasks = static_cast<int64_t>(rows.size()) * NH;
  // One (row, head) per task: a decode step has as few as the heads.
  for_blocks(tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scores(static_cast<size_t>(longest));
    for (int64_t task = begin; task < end; ++task) {
      const auto [s, r] = rows[static_cast<size_t>(task / NH)];
      const int64_t h = task % NH;
      const CachedRows<T>& seq = sequences[s];
      const T* q = seq.q + r * shape.q_ld + h * hd;
      const int64_t kv_offset = (h / group) * hd;
      const int64_t keys = seq.position + r + 1;  // causal: up to its own position
      T max_score = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        scores[static_cast<size_t>(j)] = dot(q, seq.k + j * shape.kv_ld + kv_offset, hd) * scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
      }
      T sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        const T e = std::exp(scores[static_cast<size_t>(j)] - max_score);
        scores[static_cast<size_t>(j)] = e;
        sum += e;
      }
      T* out = seq.out + r * shape.out_ld + h * hd;
      std::fill(out, out + hd, T{0});
      for (int64_t j = 0; j < keys; ++j) {
        const T p = scores[static_cast<size_t>(j)] / sum;
        const T* v = seq.v + j * shape.kv_ld + kv_offset;
        for (int64_t c = 0; c < hd; ++c) out[c] += p * v[c];
      }
    }
  });
}

template void cached_attention<float>(const std::vector<CachedRows<float>>&,
                                      const CachedAttentionShape&);
template void cached_attention<double>(const std::vector<CachedRows<double>>&,
                                       const CachedAttentionShape&);

}  // namespace dscore::transformer::cpu
