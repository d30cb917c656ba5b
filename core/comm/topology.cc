#include "core/comm/topology.h"

namespace dscore::comm {
namespace {

constexpr std::array<const char*, kAxisCount> kAxisNames = {"pipe", "data", "expert", "sequence",
                                                            "model"};

Axis axis_at(int i) { return static_cast<Axis>(i); }

}  // namespace

const char* axis_name(Axis axis) { return kAxisNames[static_cast<size_t>(axis)]; }

std::string AxisSet::name() const {
  std::string out;
  for (int i = 0; i < kAxisCount; ++i) {
    if (!contains(axis_at(i))) continue;
    if (!out.empty()) out += "+";
    out += kAxisNames[static_cast<size_t>(i)];
  }
  return out.empty() ? "none" : out;
}

Result<ParallelGrid> ParallelGrid::create(const GridShape& shape, int world_size) {
  int64_t product = 1;
  for (int i = 0; i < kAxisCount; ++i) {
    if (shape[static_cast<size_t>(i)] < 1)
      return invalid_argument(std::string("the ") + kAxisNames[static_cast<size_t>(i)] +
                              " axis has size " + std::to_string(shape[static_cast<size_t>(i)]) +
                              ": every parallel size is at least 1");
    product *= shape[static_cast<size_t>(i)];
  }
  const ParallelGrid grid(shape, world_size);
  if (product != world_size)
    return invalid_argument("the parallel sizes (" + grid.describe() + ") multiply to " +
                            std::to_string(product) + " ranks, but the job has " +
                            std::to_string(world_size) +
                            ": start as many ranks as their product, or change a size");
  return grid;
}

ParallelGrid ParallelGrid::data_parallel(int world_size) {
  return ParallelGrid({1, world_size, 1, 1, 1}, world_size);
}

Result<ParallelGrid> ParallelGrid::pipe_data(int stages, int world_size) {
  if (stages < 1 || world_size % stages != 0)
    return invalid_argument(std::to_string(stages) + " pipeline stages do not divide " +
                            std::to_string(world_size) + " ranks");
  return create({stages, world_size / stages, 1, 1, 1}, world_size);
}

Result<ParallelGrid> ParallelGrid::pipe_data_model(int stages, int model, int world_size) {
  return pipe_data_sequence_model(stages, 1, model, world_size);
}

Result<ParallelGrid> ParallelGrid::pipe_data_sequence_model(int stages, int sequence, int model,
                                                            int world_size) {
  return pipe_data_expert_sequence_model(stages, 1, sequence, model, world_size);
}

Result<ParallelGrid> ParallelGrid::pipe_data_expert_sequence_model(int stages, int expert,
                                                                   int sequence, int model,
                                                                   int world_size) {
  const int64_t fixed = int64_t{stages} * expert * sequence * model;
  if (stages < 1 || expert < 1 || sequence < 1 || model < 1 || world_size % fixed != 0)
    return invalid_argument(std::to_string(stages) + " pipeline stages of " +
                            std::to_string(expert) + " expert-parallel x " +
                            std::to_string(sequence) + " sequence-parallel x " +
                            std::to_string(model) + " tensor-parallel ranks do not divide " +
                            std::to_string(world_size) + " ranks");
  return create({stages, world_size / static_cast<int>(fixed), expert, sequence, model},
                world_size);
}

int ParallelGrid::size(AxisSet axes) const {
  int n = 1;
  for (int i = 0; i < kAxisCount; ++i)
    if (axes.contains(axis_at(i))) n *= shape_[static_cast<size_t>(i)];
  return n;
}

GridCoordinates ParallelGrid::coordinates(int rank) const {
  GridCoordinates c{};
  for (int i = kAxisCount - 1; i >= 0; --i) {
    const int n = shape_[static_cast<size_t>(i)];
    c[static_cast<size_t>(i)] = rank % n;
    rank /= n;
  }
  return c;
}

int ParallelGrid::rank_at(const GridCoordinates& coordinates) const {
  int rank = 0;
  for (int i = 0; i < kAxisCount; ++i)
    rank = rank * shape_[static_cast<size_t>(i)] + coordinates[static_cast<size_t>(i)];
  return rank;
}

std::vector<int> ParallelGrid::group_ranks(AxisSet axes, int rank) const {
  // Walk the group's coordinates in row-major order: ranks ascend.
  const GridCoordinates base = coordinates(rank);
  std::vector<int> ranks;
  GridCoordinates c = base;
  for (int i = 0; i < kAxisCount; ++i)
    if (axes.contains(axis_at(i))) c[static_cast<size_t>(i)] = 0;
  while (true) {
    ranks.push_back(rank_at(c));
    int i = kAxisCount - 1;
    for (; i >= 0; --i) {
      if (!axes.contains(axis_at(i))) continue;
      auto& v = c[static_cast<size_t>(i)];
      if (++v < shape_[static_cast<size_t>(i)]) break;
      v = 0;
    }
    if (i < 0) return ranks;
  }
}

int ParallelGrid::rank_in_group(AxisSet axes, int rank) const {
  const GridCoordinates c = coordinates(rank);
  int index = 0;
  for (int i = 0; i < kAxisCount; ++i)
    if (axes.contains(axis_at(i)))
      index = index * shape_[static_cast<size_t>(i)] + c[static_cast<size_t>(i)];
  return index;
}

int ParallelGrid::group_color(AxisSet axes, int rank) const {
  GridCoordinates c = coordinates(rank);
  for (int i = 0; i < kAxisCount; ++i)
    if (axes.contains(axis_at(i))) c[static_cast<size_t>(i)] = 0;
  return rank_at(c);
}

AxisSet ParallelGrid::effective(AxisSet axes) const {
  AxisSet out;
  for (int i = 0; i < kAxisCount; ++i)
    if (axes.contains(axis_at(i)) && shape_[static_cast<size_t>(i)] > 1) out = out.with(axis_at(i));
  return out;
}

std::string ParallelGrid::describe() const {
  std::string out;
  for (int i = 0; i < kAxisCount; ++i) {
    if (i > 0) out += " x ";
    out += kAxisNames[static_cast<size_t>(i)];
    out += " " + std::to_string(shape_[static_cast<size_t>(i)]);
  }
  return out;
}

std::vector<AxisSet> Topology::engine_groups() {
  return {groups::kPipe,     groups::kData,  groups::kExpert, groups::kExpertData,
          groups::kSequence, groups::kModel, groups::kZero};
}

Result<std::unique_ptr<Topology>> Topology::create(Communicator& world, const ParallelGrid& grid,
                                                   const std::vector<AxisSet>& wanted) {
  if (grid.world_size() != world.world_size())
    return invalid_argument("the parallel grid (" + grid.describe() + ") is for " +
                            std::to_string(grid.world_size()) + " ranks, the job has " +
                            std::to_string(world.world_size()));
  std::unique_ptr<Topology> topology(new Topology(world, grid));
  std::map<AxisSet, Communicator*> by_members;  // one communicator per distinct group
  const int rank = world.rank();
  for (AxisSet axes : wanted) {
    const AxisSet members = grid.effective(axes);
    auto made = by_members.find(members);
    if (made == by_members.end()) {
      Communicator* comm = nullptr;
      const int size = grid.size(members);
      if (size == world.world_size()) {
        comm = &world;
      } else if (size > 1) {
        // Ranked by their place in the group, which is their world order.
        DSCORE_ASSIGN_OR_RETURN(
            std::unique_ptr<Communicator> split,
            world.split(grid.group_color(members, rank), grid.rank_in_group(members, rank)));
        comm = split.get();
        topology->split_groups_.push_back(std::move(split));
      }
      made = by_members.emplace(members, comm).first;
    }
    topology->groups_[axes] = made->second;
  }
  return topology;
}

Communicator* Topology::group(AxisSet axes) const {
  auto it = groups_.find(axes);
  DSCORE_CHECK(it != groups_.end(), "the topology has no " + axes.name() + " group");
  return it->second;
}

}  // namespace dscore::comm
