// Which machines the ranks are on (comm/node_map.h), and what ZeRO++
// (docs/multinode.md#zero) builds from it: hpZ's secondary group (a node's
// ranks) and qgZ's two hops (within nodes, across them). The quantized
// collectives themselves are ZeRO's (core/zero/quantization.h).
#include "core/base/logging.h"
#include "core/engine/engine.h"

namespace dscore {

Status Engine::discover_nodes() {
  DSCORE_ASSIGN_OR_RETURN(nodes_, comm::discover_nodes(*comm_));
  if (nodes_.nodes() > 1 && rank() == 0)
    log_info(std::to_string(nodes_.nodes()) + " nodes: " + nodes_.describe());
  return Status::Ok();
}

Status Engine::add_zeropp_groups(comm::Communicator& zero_group, zero::ZeroContext* ctx) {
  // hpZ: zero_hpz_partition_size consecutive ranks of ZeRO's group.
  DSCORE_ASSIGN_OR_RETURN(ctx->secondary_comm, secondary_group(zero_group));
  // qgZ: two hops where every node holds the same number of consecutive
  // ranks (one all-to-all otherwise).
  DSCORE_ASSIGN_OR_RETURN(ctx->quantized_reduce, quantized_reduce_groups(zero_group));
  return Status::Ok();
}

Result<comm::Communicator*> Engine::secondary_group(comm::Communicator& zero_group) {
  const int64_t size = config_.zero.hpz_partition_size;
  if (size <= 1 || placement_.stage != 3) return nullptr;
  const int world = zero_group.world_size();
  if (world % size != 0 || size > world)
    return invalid_argument("zero_optimization.zero_hpz_partition_size " + std::to_string(size) +
                            " does not divide the " + std::to_string(world) +
                            " ranks of ZeRO's group: use the ranks per node (a divisor)");
  if (size == world && rank() == 0)
    log_warning("zero_optimization.zero_hpz_partition_size " + std::to_string(size) +
                " is the whole job: the secondary partition saves no communication");
  const int group = zero_group.rank() / static_cast<int>(size);
  DSCORE_ASSIGN_OR_RETURN(secondary_group_, zero_group.split(group, zero_group.rank()));
  // The point is to stay inside a node: say so where a group spans nodes.
  const int first = group * static_cast<int>(size);
  bool spans = false;
  for (int r = first; r < first + size; ++r)
    spans = spans || nodes_.node_of(r) != nodes_.node_of(first);
  if (spans && zero_group.rank() == first)
    log_warning("zero_optimization.zero_hpz_partition_size " + std::to_string(size) +
                ": the secondary group of ranks " + std::to_string(first) + "-" +
                std::to_string(first + size - 1) +
                " spans nodes, so the backward's gathers cross them; set it to the ranks per "
                "node (" +
                std::to_string(nodes_.ranks_on(nodes_.node_of(first))) + " on " +
                nodes_.host_of(first) + ")");
  if (rank() == 0)
    log_info("ZeRO++ hpZ: a secondary copy of the parameters over groups of " +
             std::to_string(size) + " ranks; the backward gathers from it");
  return secondary_group_.get();
}

Result<zero::QuantizedReduceGroups> Engine::quantized_reduce_groups(
    comm::Communicator& zero_group) {
  zero::QuantizedReduceGroups groups;
  if (!config_.zero.quantized_gradients || placement_.stage != 3) return groups;
  const int world = zero_group.world_size();
  const int local = nodes_.ranks_on(0);
  bool even = nodes_.nodes() > 1 && world == world_size();
  for (int r = 0; even && r < world; ++r) even = nodes_.node_of(r) == r / local;
  if (!even) {
    if (rank() == 0)
      log_info("ZeRO++ qgZ: gradients reduce as int4 in one all-to-all over the " +
               std::to_string(world) + " ranks" +
               (nodes_.nodes() > 1 ? " (the nodes differ in size or interleave their ranks)" : ""));
    return groups;
  }
  const int me = zero_group.rank();
  DSCORE_ASSIGN_OR_RETURN(node_group_, zero_group.split(me / local, me));
  DSCORE_ASSIGN_OR_RETURN(across_group_, zero_group.split(me % local, me));
  groups.node = node_group_.get();
  groups.across = across_group_.get();
  if (rank() == 0)
    log_info("ZeRO++ qgZ: gradients reduce as int4 in two all-to-alls, within each of the " +
             std::to_string(nodes_.nodes()) + " nodes of " + std::to_string(local) +
             " ranks, then across them");
  return groups;
}

}  // namespace dscore
