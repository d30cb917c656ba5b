// A keyed pseudo-random permutation of [0, n) that maps any one index alone,
// in O(1) time and memory: a balanced Feistel network over the smallest
// power-of-four domain >= n, cycle-walked back into [0, n). The token data
// source shuffles each epoch's chunks with it, so any rank computes any
// sample without a shuffled index table, and a resumed run sees the same order.
#pragma once

#include <array>
#include <cstdint>

#include <dscore/cpp/counter_rng.hpp>

#include "core/base/status.h"

namespace dscore::data {

// splitmix64's finaliser (the sdk's counter-based helpers): a cheap, well-mixed 64-bit hash.
using sdk::splitmix64;

class IndexPermutation {
 public:
  // n <= 2^62 (the domain is at most 4n, and a Feistel half must fit 31 bits).
  IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
    DSCORE_CHECK(n <= (uint64_t{1} << 62), "permutation domain too large");
    while ((uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
    mask_ = (uint64_t{1} << half_bits_) - 1;
    for (int r = 0; r < kRounds; ++r)
      keys_[r] = splitmix64(key ^ splitmix64(static_cast<uint64_t>(r) + 1));
  }

  uint64_t size() const { return n_; }

  // The image of j (requires j < size()). Cycle-walking stays a bijection on
  // [0, n): the Feistel cycle through j must come back to a value < n, and
  // the domain is < 4n, so fewer than 4 rounds trips are expected.
  uint64_t operator()(uint64_t j) const {
    if (n_ <= 1) return j;
    uint64_t x = j;
    do {
      x = encrypt(x);
    } while (x >= n_);
    return x;
  }

 private:
  static constexpr int kRounds = 6;

  // Each round (L, R) -> (R, L ^ F(R)) is invertible whatever F is.
  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & mask_;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t next = left ^ (splitmix64(right ^ keys_[r]) & mask_);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  int half_bits_ = 0;  // the domain is 2^(2 * half_bits_)
  uint64_t mask_ = 0;
  std::array<uint64_t, kRounds> keys_{};
};

}  // namespace dscore::data
