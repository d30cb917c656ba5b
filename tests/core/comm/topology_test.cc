// Tests for core/comm/topology.cc: the grid's arithmetic against DeepSpeed's
// layouts (PipeModelDataParallelTopology, its MoE expert groups, Ulysses'
// sequence groups), and the communicators Topology makes, exercised with
// collectives on 8 loopback ranks as threads of this process.
#include "core/comm/topology.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/core/comm/loopback_ranks.h"

namespace dscore::comm {
namespace {

using Ranks = std::vector<int>;

// Every group over `axes`, each as its ranks, in the order of their first rank.
std::vector<Ranks> all_groups(const ParallelGrid& grid, AxisSet axes) {
  std::vector<Ranks> out;
  for (int r = 0; r < grid.world_size(); ++r)
    if (grid.group_color(axes, r) == r) out.push_back(grid.group_ranks(axes, r));
  return out;
}

TEST(ParallelGrid, TodaysRunIsEveryRankOnTheDataAxis) {
  const ParallelGrid grid = ParallelGrid::data_parallel(4);
  EXPECT_EQ(grid.describe(), "pipe 1 x data 4 x expert 1 x sequence 1 x model 1");
  EXPECT_EQ(grid.size(groups::kData), 4);
  EXPECT_EQ(grid.size(groups::kZero), 4);
  EXPECT_EQ(grid.group_ranks(groups::kZero, 2), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(grid.rank_in_group(groups::kData, 3), 3);
  EXPECT_EQ(grid.size(groups::kModel), 1);
  EXPECT_EQ(grid.effective(groups::kZero), AxisSet{Axis::kData});
}

TEST(ParallelGrid, PipeDataPutsEachStageOnConsecutiveRanks) {
  auto grid = ParallelGrid::pipe_data(2, 4);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->describe(), "pipe 2 x data 2 x expert 1 x sequence 1 x model 1");
  EXPECT_EQ(grid->group_ranks(groups::kData, 3), (Ranks{2, 3}));
  EXPECT_EQ(grid->group_ranks(groups::kPipe, 1), (Ranks{1, 3}));
  EXPECT_EQ(ParallelGrid::pipe_data(1, 3)->describe(), ParallelGrid::data_parallel(3).describe());
  EXPECT_FALSE(ParallelGrid::pipe_data(2, 3).ok());
}

// DeepSpeed's PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2):
// axes (pipe, data, model), model fastest. Its data groups are
// [[0, 2], [1, 3], [4, 6], [5, 7]], its model groups [[0, 1], [2, 3], ...],
// its pipe groups [[0, 4], [1, 5], [2, 6], [3, 7]].
TEST(ParallelGrid, PipeDataModelIsDeepSpeedsLayout) {
  auto grid = ParallelGrid::create({2, 2, 1, 1, 2}, 8);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  EXPECT_EQ(all_groups(*grid, groups::kData), (std::vector<Ranks>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(all_groups(*grid, groups::kModel),
            (std::vector<Ranks>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(all_groups(*grid, groups::kPipe), (std::vector<Ranks>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(grid->coordinates(6), (GridCoordinates{1, 1, 0, 0, 0}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(grid->rank_at(grid->coordinates(r)), r);
}

// DeepSpeed-MoE with expert-parallel size 2 over 4 data-parallel ranks:
// expert groups [[0, 1], [2, 3]] (consecutive), expert-data groups
// [[0, 2], [1, 3]] (strided); the dense data group is all four.
TEST(ParallelGrid, ExpertGroupsAreConsecutiveInsideTheDataGroup) {
  auto grid = ParallelGrid::create({1, 2, 2, 1, 1}, 4);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(all_groups(*grid, groups::kExpert), (std::vector<Ranks>{{0, 1}, {2, 3}}));
  EXPECT_EQ(all_groups(*grid, groups::kExpertData), (std::vector<Ranks>{{0, 2}, {1, 3}}));
  EXPECT_EQ(all_groups(*grid, groups::kData), (std::vector<Ranks>{{0, 1, 2, 3}}));
}

// Ulysses with sequence-parallel size 2 over 4 ranks: sequence groups are
// consecutive ranks, and ZeRO partitions over data x sequence.
TEST(ParallelGrid, SequenceGroupsAreConsecutiveAndZeroSpansThem) {
  auto grid = ParallelGrid::create({1, 2, 1, 2, 1}, 4);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(all_groups(*grid, groups::kSequence), (std::vector<Ranks>{{0, 1}, {2, 3}}));
  EXPECT_EQ(all_groups(*grid, groups::kData), (std::vector<Ranks>{{0, 2}, {1, 3}}));
  EXPECT_EQ(all_groups(*grid, groups::kZero), (std::vector<Ranks>{{0, 1, 2, 3}}));
  EXPECT_EQ(grid->rank_in_group(groups::kZero, 2), 2);
}

TEST(ParallelGrid, SizesThatDoNotMultiplyToTheWorldAreRefusedByName) {
  auto wrong = ParallelGrid::create({2, 2, 1, 1, 2}, 6);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("multiply to 8 ranks, but the job has 6"),
            std::string::npos)
      << wrong.status().message();
  auto zero = ParallelGrid::create({1, 0, 1, 1, 1}, 1);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("the data axis has size 0"), std::string::npos);
}

void run_ranks(int world, const std::function<void(Communicator&)>& body) {
  testing::run_loopback_ranks(world, body);
}

// The sum over a group of (world rank + 1), by an allreduce on its communicator.
float group_sum(Communicator& group, int world_rank) {
  float x = static_cast<float>(world_rank + 1);
  const CommBuffer b{&x, DSCORE_DTYPE_F32, 1};
  EXPECT_TRUE(group.allreduce(b, b, DSCORE_REDUCE_SUM).ok());
  return x;
}

// 8 ranks as pipe 2 x data 2 x model 2: every engine group reduces over
// exactly the ranks the grid names, a group spanning the world is the world
// communicator, and groups of one rank have none.
TEST(Topology, EachGroupsCommunicatorReducesOverItsRanks) {
  auto grid = ParallelGrid::create({2, 2, 1, 1, 2}, 8);
  ASSERT_TRUE(grid.ok());
  run_ranks(8, [&](Communicator& world) {
    auto topology = Topology::create(world, *grid, Topology::engine_groups());
    ASSERT_TRUE(topology.ok()) << topology.status().message();
    const Topology& t = **topology;
    const int r = world.rank();
    for (AxisSet axes : {groups::kPipe, groups::kData, groups::kModel, groups::kZero}) {
      Communicator* g = t.group(axes);
      ASSERT_NE(g, nullptr) << axes.name();
      EXPECT_EQ(g->world_size(), 2) << axes.name();
      EXPECT_EQ(g->rank(), t.rank_in_group(axes)) << axes.name();
      float expected = 0;
      for (int member : grid->group_ranks(axes, r)) expected += static_cast<float>(member + 1);
      EXPECT_EQ(group_sum(*g, r), expected) << axes.name() << " on rank " << r;
    }
    // data and ZeRO's group have the same members here: one communicator.
    EXPECT_EQ(t.group(groups::kData), t.group(groups::kZero));
    EXPECT_EQ(t.group(groups::kSequence), nullptr);
    EXPECT_EQ(t.group(groups::kExpert), nullptr);
  });
}

TEST(Topology, ADataParallelGridSplitsNothing) {
  run_ranks(2, [](Communicator& world) {
    auto topology =
        Topology::create(world, ParallelGrid::data_parallel(2), Topology::engine_groups());
    ASSERT_TRUE(topology.ok()) << topology.status().message();
    EXPECT_EQ((*topology)->group(groups::kZero), &world);
    EXPECT_EQ((*topology)->group(groups::kData), &world);
    EXPECT_EQ((*topology)->group(groups::kModel), nullptr);
  });
}

}  // namespace
}  // namespace dscore::comm
