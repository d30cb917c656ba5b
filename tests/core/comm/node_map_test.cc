#include "core/comm/node_map.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace dscore::comm {
namespace {

TEST(NodeMap, NodesAreNamesInTheOrderOfTheirFirstRanks) {
  const NodeMap map({"b", "b", "a", "a", "b"});
  EXPECT_EQ(map.nodes(), 2);
  EXPECT_EQ(map.name_of_node(0), "b");
  EXPECT_EQ(map.name_of_node(1), "a");
  EXPECT_EQ(map.node_of(3), 1);
  EXPECT_EQ(map.host_of(4), "b");
  EXPECT_EQ(map.leader_of(0), 0);
  EXPECT_EQ(map.leader_of(1), 2);
  EXPECT_EQ(map.ranks_on(0), 3);
  EXPECT_EQ(map.describe(), "b (ranks 0-1,4), a (ranks 2-3)");
  EXPECT_EQ(NodeMap({"x"}).describe(), "x (rank 0)");
}

TEST(NodeMap, DscoreNodeNameOverridesTheHostName) {
  setenv("DSCORE_NODE_NAME", "rack3-node7", 1);
  EXPECT_EQ(NodeMap::local_node_name(), "rack3-node7");
  EXPECT_EQ(NodeMap().describe(), "rack3-node7 (rank 0)");
  unsetenv("DSCORE_NODE_NAME");
  EXPECT_NE(NodeMap::local_node_name(), "rack3-node7");
  EXPECT_FALSE(NodeMap::local_node_name().empty());
}

}  // namespace
}  // namespace dscore::comm
