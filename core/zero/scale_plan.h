// `dscore plan --nodes N --ranks-per-node R --link intra=GB/s,inter=GB/s`:
// a step's time at a scale this machine cannot run, from the plan's
// communication (zero/plan.h) and one rank's measured compute.
//
// The model, for each of the step's collectives of S bytes (the full buffer)
// over W = N x R ranks placed node by node:
// - Flat collectives (dscore's ZeRO calls one collective over all its
//   ranks; the mpi backend runs a reduce-scatter as one all-to-all and an
//   allgather as MPI_Iallgather, whose chunks go to every rank directly):
//   each rank sends S (W - 1) / W, of which S (N - 1) / N leaves its node.
//   A node's link carries R S (N - 1) / N; its ranks' traffic inside the
//   node is R S (R - 1) / W. (A ring or a hierarchical algorithm sends up
//   to R times less across nodes: this is the upper end.)
// - ZeRO++ hpZ: the backward's gathers (and later micro-steps') go over each
//   node's R ranks: R S (R - 1) / R inside the node, nothing across.
// - ZeRO++ qgZ (two hops): inside the node R S (R - 1) / R of int4 bytes,
//   across S (N - 1) / N per node.
// - A collective's time is its node traffic over the node's intra rate plus
//   its cross-node traffic over the node's link rate: the rounds inside and
//   across nodes follow each other. The link rate is the line rate of a
//   TCP/Ethernet link, which carries kLinkFraming bytes per byte of payload
//   (1514-byte frames for 1448 of data, and the acknowledgements of the
//   other direction's traffic). Latency is not counted (messages here are
//   megabytes).
// - The step: the given compute seconds plus the collectives' time, one
//   after the other (an upper bound where comm overlaps compute).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config/training_config.h"
#include "core/zero/plan.h"

namespace dscore::zero {

constexpr double kLinkFraming = 1.07;

struct LinkRates {
  double intra = 0;  // bytes/s a node's ranks move among themselves
  double inter = 0;  // bytes/s of a node's link to the others
};

// "intra=50,inter=12.5" (GB/s) -> rates; INVALID_ARGUMENT naming the text.
Result<LinkRates> parse_link_rates(const std::string& text);

struct CollectiveTraffic {
  std::string name;
  double node_bytes = 0;   // moved inside each node per step
  double cross_bytes = 0;  // over each node's link per step
  double seconds = 0;
};

struct ScaleEstimate {
  int nodes = 1, ranks_per_node = 1;
  std::vector<CollectiveTraffic> collectives;
  double comm_seconds = 0;
  std::optional<double> compute_seconds, step_seconds;
};

// `plan` is one rank's plan at world nodes x ranks_per_node.
ScaleEstimate estimate_scale(const ZeroPlan& plan, const config::ZeroConfig& zero, int nodes,
                             int ranks_per_node, const LinkRates& links,
                             std::optional<double> compute_seconds);

std::string format_scale(const ScaleEstimate& estimate, const LinkRates& links);

}  // namespace dscore::zero
