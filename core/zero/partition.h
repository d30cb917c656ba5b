// Partition layouts (docs/deepspeed-reference.md#stage-1-and-2-layout and
// docs/deepspeed-reference.md#stage-3-layout), as offset arithmetic.
//
// Stages 1/2 (FlatPartition): all parameters back to back in layout order
// in one flat buffer, zero-padded at the end to a multiple of 2·W elements
// (DeepSpeed's nccl_start_alignment_factor 2, times W); rank r owns
// [r·P, (r+1)·P) with P = padded/W, so the padding sits in the last rank(s).
// Stage 0 uses the same layout; every rank then updates the whole buffer.
//
// Stage 3 (ShardedLayout): each parameter partitioned on its own: shard size
// s = ceil(numel/W), rank r holds elements [r·s, (r+1)·s) of the
// zero-padded parameter; a rank's shards of all parameters lie back to back
// in its local buffer, in parameter order.
#pragma once

#include <cstdint>
#include <vector>

namespace dscore::zero {

struct FlatPartition {
  int world = 1;
  int64_t numel = 0;           // real elements
  int64_t padded_numel = 0;    // multiple of 2·world
  int64_t partition_size = 0;  // padded_numel / world

  int64_t begin(int rank) const { return rank * partition_size; }
  int64_t end(int rank) const { return begin(rank) + partition_size; }
  int owner(int64_t flat_index) const { return static_cast<int>(flat_index / partition_size); }
  // DeepSpeed's group_paddings entry for `rank`: padding elements inside its partition.
  int64_t padding(int rank) const;
};

FlatPartition make_flat_partition(int64_t numel, int world);

// The part of [a, b) (flat indices) that falls in each rank's partition, in
// rank order; ranks with nothing are skipped.
struct OwnedPiece {
  int rank;
  int64_t begin;  // flat index
  int64_t end;
};
std::vector<OwnedPiece> split_by_owner(const FlatPartition& p, int64_t a, int64_t b);

struct ParamShard {
  int64_t numel = 0;         // of the parameter
  int64_t shard_size = 0;    // ceil(numel / world)
  int64_t local_offset = 0;  // where this parameter's shard starts in a rank's local buffer
  // Real (non-padding) elements rank r holds, and the first of them.
  int64_t real_elements(int rank) const;
  int64_t first_element(int rank) const { return rank * shard_size; }
};

struct ShardedLayout {
  int world = 1;
  std::vector<ParamShard> params;
  int64_t local_numel = 0;  // sum of shard sizes: the same on every rank
};

ShardedLayout make_sharded_layout(const std::vector<int64_t>& param_numels, int world);

}  // namespace dscore::zero
