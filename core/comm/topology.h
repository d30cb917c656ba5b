// The job's ranks as a grid of named parallel axes, and the communicator of
// each group the engine hands down (docs/architecture.md#topology).
//
// Axes, slowest-varying first: pipe, data, expert, sequence, model. This is
// DeepSpeed's PipeModelDataParallelTopology order (pipe, data, model; a
// rank's coordinates in row-major order, the last axis fastest) with the
// sequence axis next to model (Ulysses groups are consecutive ranks) and
// the expert axis as the fast part of the data axis (DeepSpeed-MoE's expert
// groups are consecutive ranks inside a data-parallel group, its
// expert-data groups strided by the expert size). The data-parallel degree
// a user speaks of is data x expert.
//
// ParallelGrid is the arithmetic; Topology makes each group's communicator
// once, by splitting the world communicator, so nothing below the engine
// calls split itself. A run with every axis but data of size 1 is the grid
// [1, world, 1, 1, 1]: its data-parallel group is the world communicator
// itself, and no split happens.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/comm/communicator.h"

namespace dscore::comm {

enum class Axis : int { kPipe = 0, kData = 1, kExpert = 2, kSequence = 3, kModel = 4 };
inline constexpr int kAxisCount = 5;
const char* axis_name(Axis axis);  // "pipe", "data", "expert", "sequence", "model"

// A set of axes: the group of ranks that differ only along them.
class AxisSet {
 public:
  constexpr AxisSet() = default;
  constexpr AxisSet(std::initializer_list<Axis> axes) {
    for (Axis a : axes) bits_ |= 1u << static_cast<int>(a);
  }
  constexpr bool contains(Axis a) const { return (bits_ >> static_cast<int>(a)) & 1u; }
  constexpr AxisSet with(Axis a) const {
    AxisSet out = *this;
    out.bits_ |= 1u << static_cast<int>(a);
    return out;
  }
  constexpr uint32_t bits() const { return bits_; }
  constexpr bool operator==(const AxisSet&) const = default;
  constexpr bool operator<(const AxisSet& o) const { return bits_ < o.bits_; }
  std::string name() const;  // "data+expert"; "none" when empty

 private:
  uint32_t bits_ = 0;
};

// The groups the engine makes and what each is for.
namespace groups {
inline constexpr AxisSet kPipe{Axis::kPipe};          // one model's pipeline stages
inline constexpr AxisSet kModel{Axis::kModel};        // tensor-parallel shards of a layer
inline constexpr AxisSet kSequence{Axis::kSequence};  // Ulysses: one sample's sequence split
inline constexpr AxisSet kExpert{Axis::kExpert};      // the ranks an MoE layer's experts span
// The replicas of one model shard that see different samples: the batch
// triad's data-parallel world and the dense gradients' averaging.
inline constexpr AxisSet kData{Axis::kData, Axis::kExpert};
// The replicas of one expert: its gradients' averaging and ZeRO partition.
inline constexpr AxisSet kExpertData{Axis::kData};
// ZeRO's partition of the dense state: every rank holding the same model
// shard (with sequence parallelism, DeepSpeed's seq_data_parallel_group).
inline constexpr AxisSet kZero{Axis::kData, Axis::kExpert, Axis::kSequence};
}  // namespace groups

// The size of each axis, slowest first.
using GridShape = std::array<int, kAxisCount>;
using GridCoordinates = std::array<int, kAxisCount>;

class ParallelGrid {
 public:
  // INVALID_ARGUMENT unless every size is at least 1 and their product is
  // `world_size`.
  static Result<ParallelGrid> create(const GridShape& shape, int world_size);
  // Every rank on the data axis: today's runs.
  static ParallelGrid data_parallel(int world_size);
  // `stages` pipeline stages of world_size / stages data-parallel ranks each
  // (data_parallel at one stage); INVALID_ARGUMENT unless stages divides it.
  static Result<ParallelGrid> pipe_data(int stages, int world_size);
  // The same with each stage's ranks in groups of `model` tensor-parallel
  // ranks (consecutive ranks: Megatron's and DeepSpeed's order); the
  // data-parallel degree is world_size / (stages x model).
  static Result<ParallelGrid> pipe_data_model(int stages, int model, int world_size);
  // The same with each tensor-parallel part's ranks in Ulysses groups of
  // `sequence` (next to the model axis); the data-parallel degree is
  // world_size / (stages x sequence x model).
  static Result<ParallelGrid> pipe_data_sequence_model(int stages, int sequence, int model,
                                                       int world_size);
  // The same with each data-parallel group's ranks in expert-parallel
  // groups of `expert` consecutive ones (DeepSpeed-MoE's order: an expert
  // group inside a data-parallel group, its expert-data group strided).
  static Result<ParallelGrid> pipe_data_expert_sequence_model(int stages, int expert, int sequence,
                                                              int model, int world_size);

  int world_size() const { return world_; }
  int size(Axis axis) const { return shape_[static_cast<size_t>(axis)]; }
  int size(AxisSet axes) const;  // ranks in one group over `axes`
  const GridShape& shape() const { return shape_; }

  GridCoordinates coordinates(int rank) const;
  int rank_at(const GridCoordinates& coordinates) const;
  // The ranks whose coordinates outside `axes` equal `rank`'s, ascending.
  std::vector<int> group_ranks(AxisSet axes, int rank) const;
  // `rank`'s place in that group (its index in group_ranks).
  int rank_in_group(AxisSet axes, int rank) const;
  // Equal for the members of one group over `axes`, different between
  // groups: the rank of the group's first member.
  int group_color(AxisSet axes, int rank) const;
  // The axes of `axes` whose size is above 1: two sets with the same
  // effective axes have the same members.
  AxisSet effective(AxisSet axes) const;

  // "pipe 1 x data 2 x expert 1 x sequence 1 x model 1"
  std::string describe() const;

 private:
  ParallelGrid(const GridShape& shape, int world) : shape_(shape), world_(world) {}
  GridShape shape_{};
  int world_ = 1;
};

class Topology {
 public:
  // Collective over `world`: every rank calls it with the same grid and
  // groups, in the same order. A group that spans the world is `world`
  // itself and a group of one rank has no communicator; each other distinct
  // group is one split of `world`. `world` must outlive the topology.
  static Result<std::unique_ptr<Topology>> create(Communicator& world, const ParallelGrid& grid,
                                                  const std::vector<AxisSet>& wanted);
  // The engine's groups: each axis, data, expert-data and ZeRO's.
  static std::vector<AxisSet> engine_groups();

  const ParallelGrid& grid() const { return grid_; }
  int rank() const { return world_.rank(); }
  Communicator& world() const { return world_; }
  // This rank's communicator over `axes` (one of the groups created), or
  // nullptr when the group is this rank alone. DSCORE_CHECK-fails for a
  // group that was not asked for.
  Communicator* group(AxisSet axes) const;
  // The group's size and this rank's place in it (no communicator needed).
  int group_size(AxisSet axes) const { return grid_.size(axes); }
  int rank_in_group(AxisSet axes) const { return grid_.rank_in_group(axes, rank()); }

 private:
  Topology(Communicator& world, ParallelGrid grid) : world_(world), grid_(std::move(grid)) {}
  Communicator& world_;
  ParallelGrid grid_;
  std::map<AxisSet, Communicator*> groups_;                  // by the axes asked for
  std::vector<std::unique_ptr<Communicator>> split_groups_;  // the ones split off the world
};

}  // namespace dscore::comm
