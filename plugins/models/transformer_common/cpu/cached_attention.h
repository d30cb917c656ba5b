// Causal grouped-query attention of new tokens against a KV cache
// (generation's decode steps, kv_cache.h): each sequence's new query rows,
// at positions position .. position + rows - 1, attend to the cached keys
// and values of positions 0 .. their own (the new tokens' included, written
// to the cache before the call). The same math as attention.h's over the
// whole sequence, scores scaled by 1 / sqrt(head_dim); query head h reads
// key/value head h / (NH / NKV). T = float (the plugins) or double.
#pragma once

#include <cstdint>
#include <vector>

namespace dscore::transformer::cpu {

template <typename T>
struct CachedRows {
  const T* q;            // the first new row's queries (rows of stride q_ld)
  T* out;                // the first new row's output (rows of stride out_ld)
  const T* k;            // the slot's keys from position 0 (rows of stride kv_ld)
  const T* v;            // its values, laid out as k
  int64_t position = 0;  // of the first new row
  int64_t rows = 0;
};

struct CachedAttentionShape {
  int64_t NH = 0, NKV = 0, head_dim = 0;
  int64_t q_ld = 0, kv_ld = 0, out_ld = 0;
};

// Parallel over (row, head) across every sequence.
template <typename T>
void cached_attention(const std::vector<CachedRows<T>>& sequences,
                      const CachedAttentionShape& shape);

}  // namespace dscore::transformer::cpu
