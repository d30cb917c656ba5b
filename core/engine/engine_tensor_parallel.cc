// Engine: what tensor and sequence parallelism ask of the engine beyond its
// topology: the groups lent to the model; and under tensor parallelism
// (tensor_parallel.autotp_size), that the model's split tensors tile their
// whole tensors across the group, and which of this rank's parameters are
// replicated copies the gradient norm counts on the group's first rank only
// (DeepSpeed's norm counts a parameter that is not model-parallel on
// tensor-parallel rank 0 alone, the same rule).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/agreement.h"
#include "core/engine/engine.h"

namespace dscore {

Status Engine::lend_model_groups() {
  // Communicators of their own: the model calls them from the compute
  // thread while ZeRO's reductions may be in flight on the comm stream, and
  // collectives of two threads on one communicator could meet in different
  // orders on different ranks.
  const comm::ParallelGrid& grid = topology_->grid();
  const int me = comm_->rank();
  for (auto [axes, group] : {std::pair{comm::groups::kModel, DSCORE_GROUP_TENSOR_PARALLEL},
                             std::pair{comm::groups::kSequence, DSCORE_GROUP_SEQUENCE_PARALLEL},
                             std::pair{comm::groups::kExpert, DSCORE_GROUP_EXPERT_PARALLEL}}) {
    if (grid.size(axes) <= 1) continue;
    DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> own,
                            comm_->split(grid.group_color(axes, me), me));
    host_->set_communicator(group, own->host_table());
    model_groups_.push_back(std::move(own));
  }
  return Status::Ok();
}

Status Engine::check_tensor_split() const {
  Status mine = Status::Ok();
  // Per split parameter, the entries [o, o + e) of one block this rank
  // holds, as e and (o + e)^2 - o^2: summed over the group they must make
  // the whole block W and W^2 (parts that tile [0, W) telescope to it;
  // overlapping ones fall short).
  std::vector<double> held;
  std::vector<size_t> split_params;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamEntry& p = layout_.params()[i];
    const sdk::TensorSplit& s = p.split;
    if (!s.split()) continue;
    const bool valid =
        s.dim < static_cast<int32_t>(p.shape.size()) && s.blocks >= 1 &&
        p.shape[static_cast<size_t>(s.dim)] % s.blocks == 0 && s.full_extent % s.blocks == 0 &&
        s.offset >= 0 &&
        s.offset + p.shape[static_cast<size_t>(s.dim)] / s.blocks <= s.full_extent / s.blocks;
    if (!valid && mine.ok())
      mine = invalid_argument("model '" + model_->display_name() + "' declares parameter " +
                              p.name + " as a part of a whole tensor that cannot hold it (dim " +
                              std::to_string(s.dim) + ", " + std::to_string(s.blocks) +
                              " blocks, whole extent " + std::to_string(s.full_extent) +
                              ", offset " + std::to_string(s.offset) + ")");
    const double e =
        valid ? static_cast<double>(p.shape[static_cast<size_t>(s.dim)] / s.blocks) : 0.0;
    const double o = static_cast<double>(s.offset);
    held.push_back(e);
    held.push_back((o + e) * (o + e) - o * o);
    split_params.push_back(i);
  }
  if (split_params.empty() && mine.ok())
    mine = invalid_argument("model '" + model_->display_name() + "' splits no parameter over the " +
                            std::to_string(tensor_parallel_size()) +
                            " tensor-parallel ranks: it does not implement tensor parallelism; "
                            "set tensor_parallel.autotp_size to 1");
  DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, mine));
  // Every rank of a group declares the same parameters (one model), so the
  // sums line up.
  comm::Communicator& group = *topology_->group(comm::groups::kModel);
  if (!held.empty())
    DSCORE_RETURN_IF_ERROR(group.allreduce(
        {held.data(), DSCORE_DTYPE_F64, static_cast<int64_t>(held.size())},
        {held.data(), DSCORE_DTYPE_F64, static_cast<int64_t>(held.size())}, DSCORE_REDUCE_SUM));
  for (size_t k = 0; k < split_params.size() && mine.ok(); ++k) {
    const ParamEntry& p = layout_.params()[split_params[k]];
    const int64_t whole = p.split.full_extent / p.split.blocks;
    const double w = static_cast<double>(whole);
    if (held[2 * k] != w || held[2 * k + 1] != w * w)
      mine = invalid_argument(
          "model '" + model_->display_name() + "': the " + std::to_string(tensor_parallel_size()) +
          " tensor-parallel parts of " + p.name + " do not tile the " + std::to_string(whole) +
          " entries of each block along dimension " + std::to_string(p.split.dim) + " (they hold " +
          std::to_string(static_cast<int64_t>(held[2 * k])) + ", or overlap)");
  }
  return comm::agree(*comm_, mine);
}

std::vector<std::pair<int64_t, int64_t>> Engine::replicated_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const ParamEntry& p : layout_.params()) {
    if (p.split.split() || p.numel == 0) continue;
    if (!ranges.empty() && ranges.back().second == p.offset)
      ranges.back().second += p.numel;
    else
      ranges.emplace_back(p.offset, p.offset + p.numel);
  }
  return ranges;
}

}  // namespace dscore
