// Finds every plugin a config names (model, optimizer, scheduler, monitors,
// comm.backend) in the registry and validates each one's params against the
// plugin's own schema. A missing plugin (with a did-you-mean from the
// plugins found) or a bad param is a config error (JSON path + line:column)
// like any other, so `dscore config check` reports it too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/plugin_host/params.h"
#include "core/plugin_host/registry.h"

namespace dscore {

struct SelectedPlugin {
  const plugin_host::PluginInfo* info = nullptr;  // owned by the registry
  plugin_host::ValidatedParams params;
  std::string section;  // "optimizer", "scheduler", "model", "csv_monitor", ...
};

struct PluginSelection {
  std::optional<SelectedPlugin> model;
  std::optional<SelectedPlugin> optimizer;
  std::optional<SelectedPlugin> scheduler;
  std::vector<SelectedPlugin> monitors;
};

// Appends problems to loaded->errors and notes to loaded->notices.
PluginSelection select_plugins(config::LoadedConfig* loaded,
                               const plugin_host::PluginRegistry& registry,
                               const config::ResolveContext& context);

// The optimizer's configured base learning rate: its validated "lr" param,
// else "muon_lr" (Muon without a shared lr: DeepSpeed's first parameter
// group is the Muon half, whose lr it reports and schedules), or 0 when
// the optimizer has neither.
double optimizer_base_lr(const SelectedPlugin& optimizer);

}  // namespace dscore
