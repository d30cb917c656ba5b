#include "core/zero/partition.h"

#include <algorithm>

namespace dscore::zero {

FlatPartition make_flat_partition(int64_t numel, int world) {
  FlatPartition p;
  p.world = world;
  p.numel = numel;
  const int64_t align = 2 * static_cast<int64_t>(world);
  p.padded_numel = (numel + align - 1) / align * align;
  if (p.padded_numel == 0) p.padded_numel = align;
  p.partition_size = p.padded_numel / world;
  return p;
}

int64_t FlatPartition::padding(int rank) const {
  // P if the whole partition is past the real data, the overhang if it
  // straddles the end, else 0 (docs/deepspeed-reference.md#stage-1-and-2-layout).
  const int64_t b = begin(rank), e = end(rank);
  if (b >= numel) return partition_size;
  return e > numel ? e - numel : 0;
}

std::vector<OwnedPiece> split_by_owner(const FlatPartition& p, int64_t a, int64_t b) {
  std::vector<OwnedPiece> pieces;
  while (a < b) {
    const int r = p.owner(a);
    const int64_t stop = std::min(b, p.end(r));
    pieces.push_back({r, a, stop});
    a = stop;
  }
  return pieces;
}

int64_t ParamShard::real_elements(int rank) const {
  const int64_t first = first_element(rank);
  return std::clamp<int64_t>(numel - first, 0, shard_size);
}

ShardedLayout make_sharded_layout(const std::vector<int64_t>& param_numels, int world) {
  ShardedLayout layout;
  layout.world = world;
  for (int64_t numel : param_numels) {
    ParamShard s;
    s.numel = numel;
    s.shard_size = (numel + world - 1) / world;
    s.local_offset = layout.local_numel;
    layout.local_numel += s.shard_size;
    layout.params.push_back(s);
  }
  return layout;
}

}  // namespace dscore::zero
