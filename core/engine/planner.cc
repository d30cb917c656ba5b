#include "core/engine/planner.h"

#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dscore {
namespace {

std::optional<int64_t> mem_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> disk_free(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);
  if (ec) return std::nullopt;
  while (!fs::exists(at, ec) && at.has_parent_path() && at != at.parent_path())
    at = at.parent_path();
  struct statvfs st {};
  if (statvfs(at.c_str(), &st) != 0) return std::nullopt;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace

std::vector<zero::StateSlot> state_slots_of(const plugin_host::OptimizerInstance& optimizer) {
  std::vector<zero::StateSlot> slots;
  for (const auto& s : optimizer.slots()) slots.push_back({s.name, s.dtype, s.elements_per_param});
  return slots;
}

zero::NodeCapacity read_node_capacity(const zero::ZeroPlan& plan, int local_ranks) {
  zero::NodeCapacity node;
  node.local_ranks = local_ranks;
  node.ram_available = mem_available();
  if (!plan.disk_path().empty()) node.disk_available = disk_free(plan.disk_path());
  return node;
}

Status check_job_fits(const config::TrainingConfig& config, const ParamLayout& layout,
                      const std::vector<zero::StateSlot>& slots, const comm::JobEnv& job) {
  if (auto errors = zero::offload_plan_errors(config); !errors.empty())
    return invalid_argument(errors.front().path + ": " + errors.front().message);
  const zero::ZeroPlan plan = zero::make_plan(config, layout, slots, job.world_size, job.rank);
  return zero::check_fits(plan, read_node_capacity(plan, job.ranks_on_node()));
}

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
  const std::vector<zero::StateSlot> slots = state_slots_of(*optimizer);
  std::vector<zero::ZeroPlan> plans;
  for (int rank = 0; rank < world_size; ++rank)
    plans.push_back(zero::make_plan(cfg, layout, slots, world_size, rank));
  return plans;
}

}  // namespace dscore
