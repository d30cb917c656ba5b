// The per-rank chunk layout of ZeRO-3's coalesced collectives (one allgather
// of many parameters' shards, one reduce-scatter of many layers' gradients):
// with shard sizes s_i, chunk r holds shard r of every parameter, in order,
// so rank r's part of the collective is one contiguous run. A parameter's
// "full" form is its world x s_i padded elements, shard r at element r * s_i.
//
// The copies go through device::ops::copy on the caller's target, so the
// same code packs host memory and enqueues the copies of device memory on a
// CUDA stream.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <vector>

#include "core/device/ops.h"

namespace dscore::zero {

struct ShardedRun {
  char* full;     // (world x shard) elements
  int64_t shard;  // elements per rank
};

// Elements of one chunk: the sum of the shards.
int64_t chunk_elements(const std::vector<ShardedRun>& runs);
// full forms -> chunks (world x chunk_elements), elements of `dtype`.
void pack_rank_chunks(device::ops::Target target, const std::vector<ShardedRun>& runs, int world,
                      dscore_dtype dtype, char* chunks);
// chunks -> full forms.
void unpack_rank_chunks(device::ops::Target target, const char* chunks,
                        const std::vector<ShardedRun>& runs, int world, dscore_dtype dtype);

}  // namespace dscore::zero
