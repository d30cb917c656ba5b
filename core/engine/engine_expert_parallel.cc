// Engine: what expert parallelism (expert_parallel.autoep_size,
// docs/moe.md#expert-parallelism) asks of the engine beyond its topology
// and the expert group lent to the model (engine_tensor_parallel.cc): ZeRO
// in two domains, the experts' over their expert-data-parallel group
// (core/zero/expert_split_zero.h), and that the model's experts are parts
// of whole tensors that tile them across the expert group.
#include <memory>
#include <string>
#include <vector>

#include "core/comm/agreement.h"
#include "core/engine/engine.h"
#include "core/zero/expert_split_zero.h"

namespace dscore {

Result<std::unique_ptr<zero::ZeroStrategy>> Engine::make_strategy(const zero::ZeroContext& ctx) {
  if (expert_parallel_size() <= 1) return zero::make_zero_strategy(ctx);
  DSCORE_RETURN_IF_ERROR(check_expert_split());
  // Every rank splits or none does: the grid is the same on all.
  if (topology_->group(comm::groups::kExpertData) == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(own_expert_group_, comm_->split(comm_->rank(), 0));
  }
  // Summed over the expert's replicas, divided by every data-parallel rank
  // (zero/expert_split_zero.h).
  const zero::Reduction reduction =
      zero::plan_reduction(config_, expert_data_group().world_size(), data_parallel_size());
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<zero::ExpertSplitZero> strategy,
                          zero::ExpertSplitZero::create(ctx, &expert_data_group(), reduction));
  return std::unique_ptr<zero::ZeroStrategy>(std::move(strategy));
}

Status Engine::check_expert_split() const {
  Status mine = Status::Ok();
  int experts = 0;
  for (const ParamEntry& p : layout_.params()) {
    if ((p.flags & DSCORE_PARAM_EXPERT) == 0) continue;
    ++experts;
    if (!mine.ok()) continue;
    if (!p.split.split())
      mine = unimplemented(
          "model '" + model_->display_name() + "' declares expert parameter " + p.name +
          " as one expert's whole tensor; expert parallelism takes experts stacked in one "
          "tensor per layer (DSCORE_PARAM_TP_SPLIT along the experts) so far: set "
          "expert_parallel.enabled false");
    else if (p.split.dim != 0 || p.split.blocks != 1 ||
             p.split.full_extent != p.shape[0] * expert_parallel_size() ||
             p.split.offset != p.shape[0] * expert_parallel_rank())
      mine = invalid_argument("model '" + model_->display_name() + "' declares expert parameter " +
                              p.name + " as experts [" + std::to_string(p.split.offset) + ", " +
                              std::to_string(p.split.offset + p.shape[0]) + ") of " +
                              std::to_string(p.split.full_extent) + ", but expert rank " +
                              std::to_string(expert_parallel_rank()) + " of " +
                              std::to_string(expert_parallel_size()) + " holds an equal share " +
                              "in order along dimension 0");
  }
  if (experts == 0 && mine.ok())
    mine = invalid_argument("model '" + model_->display_name() +
                            "' declares no expert parameter (DSCORE_PARAM_EXPERT): it has no "
                            "MoE layers to spread over " +
                            std::to_string(expert_parallel_size()) +
                            " ranks; set the gpt's moe_num_experts, or expert_parallel.enabled "
                            "false");
  return comm::agree(*comm_, mine);
}

}  // namespace dscore
