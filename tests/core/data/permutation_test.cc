// Tests for core/data/permutation.h and SampleOrder (token_source.h): each
// epoch visits every chunk exactly once, the order is a function of seed and
// epoch, and shuffle=false reads the chunks in file order.
#include "core/data/permutation.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/data/token_source.h"

namespace dscore::data {
namespace {

std::vector<uint64_t> image(const IndexPermutation& p) {
  std::vector<uint64_t> out;
  for (uint64_t j = 0; j < p.size(); ++j) out.push_back(p(j));
  return out;
}

TEST(IndexPermutation, IsABijectionForAnySize) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 15, 16, 17, 63, 64, 65, 100, 1000, 4097, 70001}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      IndexPermutation p(n, key);
      std::vector<bool> seen(n, false);
      for (uint64_t v : image(p)) {
        ASSERT_LT(v, n) << "n " << n;
        ASSERT_FALSE(seen[v]) << "n " << n << " key " << key << ": " << v << " twice";
        seen[v] = true;
      }
    }
  }
}

TEST(IndexPermutation, ShufflesAndDependsOnTheKey) {
  const uint64_t n = 1000;
  const std::vector<uint64_t> a = image(IndexPermutation(n, 1));
  EXPECT_EQ(a, image(IndexPermutation(n, 1)));
  const std::vector<uint64_t> b = image(IndexPermutation(n, 2));
  int fixed = 0, same = 0;
  for (uint64_t j = 0; j < n; ++j) {
    fixed += a[j] == j;
    same += a[j] == b[j];
  }
  // A random permutation has ~1 fixed point and agrees with another at ~1
  // place; allow a wide margin.
  EXPECT_LT(fixed, 20);
  EXPECT_LT(same, 20);
}

TEST(SampleOrder, WithoutShuffleReadsChunksInOrderEveryEpoch) {
  SampleOrder order(7, 42, false);
  for (int64_t i = 0; i < 21; ++i) EXPECT_EQ(order.chunk_of(i), i % 7);
}

TEST(SampleOrder, EachEpochVisitsEveryChunkOnceInItsOwnOrder) {
  for (int64_t n : {1, 2, 3, 10, 33, 256}) {
    SampleOrder order(n, 7, true);
    std::vector<std::vector<int64_t>> epochs;
    for (int64_t e = 0; e < 3; ++e) {
      std::vector<int64_t> chunks;
      std::vector<bool> seen(static_cast<size_t>(n), false);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t c = order.chunk_of(e * n + j);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, n);
        ASSERT_FALSE(seen[static_cast<size_t>(c)]) << "n " << n << " epoch " << e;
        seen[static_cast<size_t>(c)] = true;
        chunks.push_back(c);
      }
      epochs.push_back(chunks);
    }
    if (n >= 10) {
      EXPECT_NE(epochs[0], epochs[1]) << n;
      EXPECT_NE(epochs[1], epochs[2]) << n;
    }
  }
}

TEST(SampleOrder, SeedDecidesTheOrder) {
  SampleOrder a(500, 1, true), a2(500, 1, true), b(500, 2, true);
  int differ = 0;
  for (int64_t i = 0; i < 500; ++i) {
    EXPECT_EQ(a.chunk_of(i), a2.chunk_of(i));
    differ += a.chunk_of(i) != b.chunk_of(i);
  }
  EXPECT_GT(differ, 450);
}

}  // namespace
}  // namespace dscore::data
