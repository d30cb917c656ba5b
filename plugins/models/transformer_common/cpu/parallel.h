// The CPU kernels' one way to split work: fixed blocks over TBB, so every
// reduction order is independent of the thread count.
#pragma once

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>

namespace dscore::transformer::cpu {

constexpr int64_t kRowBlock = 16;  // rows per task for row-wise kernels
constexpr int64_t kElementBlock = 1 << 14;

// How many blocks of `block` cover [0, n).
inline int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Calls fn(begin, end) for fixed blocks of [0, n) in parallel.
template <typename Fn>
void for_blocks(int64_t n, int64_t block, Fn&& fn) {
  const int64_t blocks = blocks_of(n, block);
  if (blocks <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(int64_t{0}, blocks,
                    [&](int64_t b) { fn(b * block, std::min(n, (b + 1) * block)); });
}

}  // namespace dscore::transformer::cpu
