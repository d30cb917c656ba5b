// Communicator groups (Communicator::split over the comm ABI's split): 4
// ranks, threads of this process on the loopback backend, split into 2 x 2
// groups two ways (pairs and strides), run collectives inside each group,
// and a rank that joins no group. The same test runs on the mpi backend
// under mpirun in tests/multirank/mpi_collectives_test.cc.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "core/comm/communicator.h"
#include "tests/core/comm/loopback_ranks.h"

namespace dscore::comm {
namespace {

void run_ranks(int world, const std::function<void(Communicator&)>& body) {
  testing::run_loopback_ranks(world, body);
}

CommBuffer f32(std::vector<float>& v) {
  return {v.data(), DSCORE_DTYPE_F32, static_cast<int64_t>(v.size())};
}

TEST(CommunicatorGroups, FourRanksSplitIntoTwoPairsEachReducingAlone) {
  run_ranks(4, [](Communicator& world) {
    const int r = world.rank();
    auto pair = world.split(/*color=*/r / 2, /*key=*/r);
    ASSERT_TRUE(pair.ok()) << pair.status().message();
    ASSERT_TRUE(*pair);
    Communicator& g = **pair;
    EXPECT_EQ(g.world_size(), 2);
    EXPECT_EQ(g.rank(), r % 2);
    EXPECT_EQ(g.host_table()->world_size, 2);
    std::vector<float> x = {static_cast<float>(r + 1), 10.0f * static_cast<float>(r + 1)};
    ASSERT_TRUE(g.allreduce(f32(x), f32(x), DSCORE_REDUCE_SUM).ok());
    // Ranks {0, 1} sum 1 + 2, ranks {2, 3} sum 3 + 4.
    const float s = r < 2 ? 3.0f : 7.0f;
    EXPECT_EQ(x, (std::vector<float>{s, 10.0f * s}));
    std::vector<float> mine = {static_cast<float>(r)}, both(2);
    ASSERT_TRUE(g.allgather(f32(mine), f32(both)).ok());
    const float first = static_cast<float>(r - r % 2);
    EXPECT_EQ(both, (std::vector<float>{first, first + 1}));
    // The world still works beside its groups.
    std::vector<float> one = {1.0f};
    ASSERT_TRUE(world.allreduce(f32(one), f32(one), DSCORE_REDUCE_SUM).ok());
    EXPECT_EQ(one[0], 4.0f);
  });
}

TEST(CommunicatorGroups, StridedGroupsAreRankedByKey) {
  run_ranks(4, [](Communicator& world) {
    const int r = world.rank();
    // Colour r % 2 gives {0, 2} and {1, 3}; a descending key reverses the order.
    auto group = world.split(r % 2, /*key=*/-r);
    ASSERT_TRUE(group.ok()) << group.status().message();
    Communicator& g = **group;
    EXPECT_EQ(g.world_size(), 2);
    EXPECT_EQ(g.rank(), r < 2 ? 1 : 0);
    std::vector<float> v = {static_cast<float>(r)};
    ASSERT_TRUE(g.broadcast(f32(v), /*root=*/0).ok());
    EXPECT_EQ(v[0],
              static_cast<float>(r + (r < 2 ? 2 : 0)));  // the group's rank 0 is the higher rank
    std::vector<float> chunks = {static_cast<float>(r), static_cast<float>(10 * r)}, out(1);
    ASSERT_TRUE(g.reduce_scatter(f32(chunks), f32(out), DSCORE_REDUCE_SUM).ok());
    const float other = static_cast<float>(r < 2 ? r + 2 : r - 2);
    EXPECT_EQ(out[0], g.rank() == 0 ? static_cast<float>(r) + other
                                    : 10.0f * (static_cast<float>(r) + other));
  });
}

TEST(CommunicatorGroups, ARankOutsideEveryGroupGetsNone) {
  std::mutex mutex;
  std::vector<int> sizes;
  run_ranks(3, [&](Communicator& world) {
    const int r = world.rank();
    auto group = world.split(r == 2 ? DSCORE_COMM_SPLIT_NONE : 0, r);
    ASSERT_TRUE(group.ok()) << group.status().message();
    std::lock_guard<std::mutex> lock(mutex);
    sizes.push_back(*group ? (*group)->world_size() : 0);
  });
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int>{0, 2, 2}));
}

TEST(CommunicatorGroups, ABadColourIsRefusedBeforeAnyCollective) {
  run_ranks(1, [](Communicator& world) {
    auto group = world.split(-7, 0);
    EXPECT_EQ(group.status().code(), DSCORE_INVALID_ARGUMENT);
  });
}

}  // namespace
}  // namespace dscore::comm
