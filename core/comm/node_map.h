// Which ranks share a machine. Every rank says its node's name (the host
// name, or DSCORE_NODE_NAME where set: containers that share a host name on
// different machines) and the names are gathered once: a node is the ranks
// of one name, numbered in the order of their first ranks. Launchers give a
// local rank too (job_env.h); the names are what every launcher and a
// job started by hand agree on, and what messages print.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/comm/communicator.h"

namespace dscore::comm {

class NodeMap {
 public:
  NodeMap() : NodeMap({local_node_name()}) {}
  // From every rank's node name, in rank order.
  explicit NodeMap(std::vector<std::string> rank_names);

  int nodes() const { return static_cast<int>(names_.size()); }
  int node_of(int rank) const { return node_of_[static_cast<size_t>(rank)]; }
  const std::string& name_of_node(int node) const { return names_[static_cast<size_t>(node)]; }
  const std::string& host_of(int rank) const { return name_of_node(node_of(rank)); }
  // The node's first rank: the one that does a node's one-off work.
  int leader_of(int node) const { return leaders_[static_cast<size_t>(node)]; }
  int ranks_on(int node) const;
  // "hostA (ranks 0-1), hostB (ranks 2-3)".
  std::string describe() const;

  // DSCORE_NODE_NAME, else gethostname().
  static std::string local_node_name();

 private:
  std::vector<std::string> names_;
  std::vector<int> node_of_, leaders_;
};

// Gathers every rank's node name (a collective of `comm`).
Result<NodeMap> discover_nodes(Communicator& comm);

}  // namespace dscore::comm
