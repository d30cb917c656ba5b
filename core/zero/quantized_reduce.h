// ZeRO++'s qgZ (zero_quantized_gradients): stage 3's gradient
// reduce-scatter as all-to-alls of int4 blocks (quantization.h), DeepSpeed's
// all_to_all_quant_reduce. With nodes of equal size the reduction has two
// hops: within each node every rank sends each peer the chunks of the
// ranks at the peer's local index on every node, each peer sums what it
// gets (fp32) and quantizes the node's sums again, and across nodes each
// rank sends every node's sum to its owner, who sums them. Across nodes a
// rank then sends (nodes - 1) chunks of int4, where a reduce-scatter of
// 16-bit gradients sends (world - 1) chunks of 16 bits. Without such
// groups, one all-to-all over the whole group.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>

#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "core/device/device.h"

namespace dscore::zero {

struct QuantizedReduceGroups {
  comm::Communicator* node = nullptr;    // this node's ranks (local index order)
  comm::Communicator* across = nullptr;  // the ranks at this local index, one per node
};

// `send`: world chunks of `chunk` values of `dtype`, chunk r for rank r of
// `comm`; `out`: this rank's chunk reduced with `op` (SUM or AVG). Host
// memory.
Status quantized_reduce_scatter(comm::Communicator& comm, const QuantizedReduceGroups& groups,
                                const void* send, dscore_dtype dtype, int64_t chunk,
                                dscore_reduce_op op, void* out, const device::Device* device);

}  // namespace dscore::zero
