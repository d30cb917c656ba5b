#include "core/engine/plugin_setup.h"

#include "core/config/auto_rules.h"

namespace dscore {
namespace {

std::optional<SelectedPlugin> select_one(config::LoadedConfig* loaded,
                                         const plugin_host::PluginRegistry& registry,
                                         const config::AutoResolver& resolver,
                                         dscore_plugin_kind kind, const config::PluginRef& ref,
                                         const std::string& section) {
  auto found = registry.find(kind, ref.type);
  if (!found.ok()) {
    loaded->errors.push_back({section + ".type", ref.location, found.status().message()});
    return std::nullopt;
  }
  SelectedPlugin selected;
  selected.info = *found;
  selected.section = section;
  selected.params = plugin_host::validate_params(**found, ref.params, ref.params_path, resolver,
                                                 &loaded->errors, &loaded->notices);
  return selected;
}

}  // namespace

PluginSelection select_plugins(config::LoadedConfig* loaded,
                               const plugin_host::PluginRegistry& registry,
                               const config::ResolveContext& context) {
  PluginSelection selection;
  if (!loaded->config) return selection;
  const config::TrainingConfig& cfg = *loaded->config;
  const config::AutoResolver resolver = config::make_auto_resolver(context, loaded->resolved);
  if (cfg.model)
    selection.model = select_one(loaded, registry, resolver, DSCORE_KIND_MODEL, *cfg.model, "model");
  if (cfg.optimizer)
    selection.optimizer =
        select_one(loaded, registry, resolver, DSCORE_KIND_OPTIMIZER, *cfg.optimizer, "optimizer");
  if (cfg.scheduler)
    selection.scheduler =
        select_one(loaded, registry, resolver, DSCORE_KIND_SCHEDULER, *cfg.scheduler, "scheduler");
  for (const config::PluginRef& monitor : cfg.monitors) {
    // The section name is the JSON path's first component ("csv_monitor.output_path").
    std::string section = monitor.params_path.substr(0, monitor.params_path.find('.'));
    if (auto selected = select_one(loaded, registry, resolver, DSCORE_KIND_MONITOR, monitor, section))
      selection.monitors.push_back(std::move(*selected));
  }
  return selection;
}

double optimizer_base_lr(const SelectedPlugin& optimizer) {
  const json::Value* lr = optimizer.params.values().find("lr");
  return lr != nullptr && lr->is_number() ? lr->as_number() : 0.0;
}

}  // namespace dscore
