// Partition layouts against the examples of
// docs/deepspeed-reference.md#stage-1-and-2-layout and #stage-3-layout: params of
// 12,12,12,12,5 elements (53 total) and 53-element stage-3 shards.
#include <gtest/gtest.h>

#include "core/zero/partition.h"

namespace dscore::zero {
namespace {

TEST(FlatPartition, DeepSpeedExampleTwoRanks) {
  // W=2 -> pad to 56, P=28, paddings [0, 3] (docs/deepspeed-reference.md#stage-1-and-2-layout).
  FlatPartition p = make_flat_partition(53, 2);
  EXPECT_EQ(p.padded_numel, 56);
  EXPECT_EQ(p.partition_size, 28);
  EXPECT_EQ(p.padding(0), 0);
  EXPECT_EQ(p.padding(1), 3);
}

TEST(FlatPartition, DeepSpeedExampleFourRanks) {
  // W=4 -> pad to 56, P=14, paddings [0,0,0,3].
  FlatPartition p = make_flat_partition(53, 4);
  EXPECT_EQ(p.padded_numel, 56);
  EXPECT_EQ(p.partition_size, 14);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(p.padding(r), 0);
  EXPECT_EQ(p.padding(3), 3);
  // Every partition start is 4-byte aligned for 2-byte elements (even index).
  for (int r = 0; r < 4; ++r) EXPECT_EQ(p.begin(r) % 2, 0);
}

TEST(FlatPartition, WholePartitionOfPaddingCountsAsPadding) {
  FlatPartition p = make_flat_partition(3, 4);  // padded to 8, P = 2
  EXPECT_EQ(p.padded_numel, 8);
  EXPECT_EQ(p.padding(0), 0);
  EXPECT_EQ(p.padding(1), 1);
  EXPECT_EQ(p.padding(2), 2);
  EXPECT_EQ(p.padding(3), 2);
}

TEST(FlatPartition, SplitByOwnerCoversARangeInRankOrder) {
  FlatPartition p = make_flat_partition(53, 4);  // P = 14
  std::vector<OwnedPiece> pieces = split_by_owner(p, 10, 31);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].rank, 0);
  EXPECT_EQ(pieces[0].begin, 10);
  EXPECT_EQ(pieces[0].end, 14);
  EXPECT_EQ(pieces[1].rank, 1);
  EXPECT_EQ(pieces[1].end, 28);
  EXPECT_EQ(pieces[2].rank, 2);
  EXPECT_EQ(pieces[2].begin, 28);
  EXPECT_EQ(pieces[2].end, 31);
  EXPECT_TRUE(split_by_owner(p, 5, 5).empty());
}

TEST(ShardedLayout, DeepSpeedExampleFiftyThreeElementsFourRanks) {
  // 53 elements, W=4: shard 14, rank 3 holds 11 real + 3 padding
  // (docs/deepspeed-reference.md#stage-3-layout).
  ShardedLayout s = make_sharded_layout({53}, 4);
  ASSERT_EQ(s.params.size(), 1u);
  EXPECT_EQ(s.params[0].shard_size, 14);
  EXPECT_EQ(s.params[0].real_elements(0), 14);
  EXPECT_EQ(s.params[0].real_elements(3), 11);
  EXPECT_EQ(s.params[0].first_element(3), 42);
  EXPECT_EQ(s.local_numel, 14);
}

TEST(ShardedLayout, ShardsLieBackToBackAndTinyParamsLeaveSomeRanksEmpty) {
  ShardedLayout s = make_sharded_layout({12, 12, 12, 12, 5, 1}, 4);
  EXPECT_EQ(s.params[0].local_offset, 0);
  EXPECT_EQ(s.params[1].local_offset, 3);
  EXPECT_EQ(s.params[4].shard_size, 2);
  EXPECT_EQ(s.params[4].real_elements(2), 1);
  EXPECT_EQ(s.params[4].real_elements(3), 0);
  EXPECT_EQ(s.params[5].real_elements(0), 1);
  EXPECT_EQ(s.params[5].real_elements(1), 0);
  EXPECT_EQ(s.local_numel, 3 * 4 + 2 + 1);
}

}  // namespace
}  // namespace dscore::zero
