#include "core/engine/planner.h"

namespace dscore {

Result<std::vector<zero::ZeroPlan>> plan_job(const Setup& setup, int world_size) {
  DSCORE_CHECK(setup.loaded.ok(), "plan_job on a config with errors");
  const config::TrainingConfig& cfg = *setup.loaded.config;
  if (!setup.selection.model)
    return invalid_argument(
        "`dscore plan` needs a \"model\" section: the plan follows the model's parameters");
  if (!setup.selection.optimizer)
    return invalid_argument(
        "`dscore plan` needs an \"optimizer\" section: the plan counts its state");
  plugin_host::InstanceContext context;
  context.seed = cfg.seed;
  context.world_size = world_size;
  DSCORE_ASSIGN_OR_RETURN(
      auto model, plugin_host::ModelInstance::create(*setup.selection.model->info,
                                                     setup.selection.model->params, context));
  DSCORE_ASSIGN_OR_RETURN(auto optimizer, plugin_host::OptimizerInstance::create(
                                              *setup.selection.optimizer->info,
                                              setup.selection.optimizer->params, context));
  DSCORE_ASSIGN_OR_RETURN(ParamLayout layout, ParamLayout::from_description(model->description()));
  std::vector<zero::StateSlot> slots;
  for (const auto& s : optimizer->slots()) slots.push_back({s.name, s.dtype, s.elements_per_param});
  std::vector<zero::ZeroPlan> plans;
  for (int rank = 0; rank < world_size; ++rank)
    plans.push_back(zero::make_plan(cfg, layout, slots, world_size, rank));
  return plans;
}

}  // namespace dscore
