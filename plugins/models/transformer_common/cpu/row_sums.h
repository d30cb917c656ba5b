// Column sums of an (N, n) row-major matrix added into acc (a bias
// gradient: the sum of the output gradient's rows), by fixed blocks of
// contiguous rows over TBB: each block sums its rows into a partial, then
// the partials are added into acc block after block. Contiguous rows
// stream from memory where a column-blocked walk over all N rows strides
// (and stalls); the fixed blocks keep the order independent of the thread
// count. produce(r0, r1), called in a block's task before its rows are
// summed, may compute those rows first (a fused elementwise pass whose
// output is summed while still in cache).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "vector_math.h"

namespace dscore::transformer::cpu {

constexpr int64_t kRowSumBlock = 32;

// acc[i] += rows[r * n + i] for r in [0, n_rows), in row order.
template <typename T>
void add_rows(T* acc, const T* rows, int64_t n_rows, int64_t stride, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    add_rows_f32(acc, rows, n_rows, stride, n);
  } else {
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t i = 0; i < n; ++i) acc[i] += rows[r * stride + i];
  }
}

// The blocks' partial sums, filled by tasks in any order (each block's
// rows by one task, in row order), then added into acc block after block.
template <typename T>
class RowSumPartials {
 public:
  RowSumPartials(int64_t N, int64_t n)
      : n_(n),
        blocks_(blocks_of(N, kRowSumBlock)),
        partial_(static_cast<size_t>(blocks_ * n), T{0}) {}
  // Rows r0..r1 (n apart) of one block; r0 starts it, or continues its rows.
  void add(int64_t r0, int64_t r1, const T* rows) {
    add_rows(partial_.data() + (r0 / kRowSumBlock) * n_, rows, r1 - r0, n_, n_);
  }
  // Rows r0..r1 of any blocks, each block's share added in turn.
  void add_blocks(int64_t r0, int64_t r1, const T* rows) {
    for (int64_t b0 = r0; b0 < r1;) {
      const int64_t b1 = std::min(r1, (b0 / kRowSumBlock + 1) * kRowSumBlock);
      add(b0, b1, rows + (b0 - r0) * n_);
      b0 = b1;
    }
  }
  void sum_into(T* acc) const {
    for_blocks(n_, 256, [&](int64_t c0, int64_t c1) {
      add_rows(acc + c0, partial_.data() + c0, blocks_, n_, c1 - c0);
    });
  }

 private:
  int64_t n_, blocks_;
  std::vector<T> partial_;
};

// The same over rows that need not be in one array: produce(r0, r1)
// returns where the block's rows are (row r0 first, n apart), for rows
// that live only in a task's scratch.
template <typename T, typename Produce>
void add_row_sums_of(T* acc, int64_t N, int64_t n, Produce&& produce) {
  RowSumPartials<T> partials(N, n);
  for_blocks(N, kRowSumBlock,
             [&](int64_t r0, int64_t r1) { partials.add(r0, r1, produce(r0, r1)); });
  partials.sum_into(acc);
}

template <typename T, typename Produce>
void add_row_sums(T* acc, const T* rows, int64_t N, int64_t n, Produce&& produce) {
  add_row_sums_of(acc, N, n, [&](int64_t r0, int64_t r1) {
    produce(r0, r1);
    return rows + r0 * n;
  });
}

template <typename T>
void add_row_sums(T* acc, const T* rows, int64_t N, int64_t n) {
  add_row_sums(acc, rows, N, n, [](int64_t, int64_t) {});
}

}  // namespace dscore::transformer::cpu
