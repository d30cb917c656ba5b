#include "core/comm/node_map.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/comm/agreement.h"

namespace dscore::comm {

NodeMap::NodeMap(std::vector<std::string> rank_names) {
  for (std::string& name : rank_names) {
    auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end()) {
      leaders_.push_back(static_cast<int>(node_of_.size()));
      names_.push_back(std::move(name));
      it = names_.end() - 1;
    }
    node_of_.push_back(static_cast<int>(it - names_.begin()));
  }
}

int NodeMap::ranks_on(int node) const {
  return static_cast<int>(std::count(node_of_.begin(), node_of_.end(), node));
}

std::string NodeMap::describe() const {
  std::string out;
  for (int n = 0; n < nodes(); ++n) {
    // Runs of consecutive ranks: "0-1,4".
    std::string ranks;
    int first = -1, last = -2;
    auto flush = [&] {
      if (first < 0) return;
      ranks += (ranks.empty() ? "" : ",") + std::to_string(first) +
               (last > first ? "-" + std::to_string(last) : "");
    };
    for (int r = 0; r < static_cast<int>(node_of_.size()); ++r) {
      if (node_of(r) != n) continue;
      if (r != last + 1) {
        flush();
        first = r;
      }
      last = r;
    }
    flush();
    out += (out.empty() ? "" : ", ") + name_of_node(n) + " (rank" + (ranks_on(n) > 1 ? "s " : " ") +
           ranks + ")";
  }
  return out;
}

std::string NodeMap::local_node_name() {
  if (const char* name = std::getenv("DSCORE_NODE_NAME"); name != nullptr && *name != '\0')
    return name;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

Result<NodeMap> discover_nodes(Communicator& comm) {
  if (comm.world_size() == 1) return NodeMap();
  DSCORE_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          allgather_strings(comm, NodeMap::local_node_name()));
  return NodeMap(std::move(names));
}

}  // namespace dscore::comm
