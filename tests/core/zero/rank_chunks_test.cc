// The per-rank chunk layout of ZeRO-3's coalesced collectives: chunk r holds
// shard r of every parameter in order, and unpacking inverts packing.
#include <gtest/gtest.h>

#include <vector>

#include "core/zero/rank_chunks.h"

namespace dscore::zero {
namespace {

TEST(RankChunks, ChunkRHoldsShardROfEveryParameterInOrder) {
  // Two ranks; parameter a has shards of 2 (4 padded elements), b of 1.
  std::vector<int> a = {10, 11, 12, 13}, b = {20, 21};
  std::vector<ShardedRun> runs = {{reinterpret_cast<char*>(a.data()), 2},
                                  {reinterpret_cast<char*>(b.data()), 1}};
  EXPECT_EQ(chunk_elements(runs), 3);
  std::vector<int> chunks(6);
  pack_rank_chunks(device::ops::Target::cpu(), runs, 2, DSCORE_DTYPE_I32,
                   reinterpret_cast<char*>(chunks.data()));
  EXPECT_EQ(chunks, (std::vector<int>{10, 11, 20, 12, 13, 21}));

  std::vector<int> a2(4), b2(2);
  std::vector<ShardedRun> back = {{reinterpret_cast<char*>(a2.data()), 2},
                                  {reinterpret_cast<char*>(b2.data()), 1}};
  unpack_rank_chunks(device::ops::Target::cpu(), reinterpret_cast<const char*>(chunks.data()), back,
                     2, DSCORE_DTYPE_I32);
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
}

TEST(RankChunks, EmptyShardsTakeNoSpace) {
  std::vector<short> a = {1, 2, 3};
  std::vector<ShardedRun> runs = {{nullptr, 0}, {reinterpret_cast<char*>(a.data()), 1}};
  std::vector<short> chunks(3);
  pack_rank_chunks(device::ops::Target::cpu(), runs, 3, DSCORE_DTYPE_I16,
                   reinterpret_cast<char*>(chunks.data()));
  EXPECT_EQ(chunks, a);
}

}  // namespace
}  // namespace dscore::zero
