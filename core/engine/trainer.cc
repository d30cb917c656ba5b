#include "core/engine/trainer.h"

#include <cstdio>
#include <filesystem>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/config/config.h"
#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/engine.h"
#include "core/engine/plugin_setup.h"
#include "core/engine/progress.h"
#include "core/plugin_host/crash_handler.h"
#include "core/plugin_host/registry.h"

namespace dscore {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitConfigError = 2;

int print_config_errors(const config::LoadedConfig& loaded) {
  for (const config::ConfigError& e : loaded.errors)
    std::fprintf(stderr, "error: %s\n", config::format_error(e, loaded.source_name).c_str());
  return kExitConfigError;
}

int fail(const Status& status) {
  log_error(status.message());
  return kExitFailure;
}

// Sections `dscore run` needs beyond what DeepSpeed's schema requires.
void require_run_sections(config::LoadedConfig* loaded) {
  const config::TrainingConfig& cfg = *loaded->config;
  if (!cfg.model)
    loaded->errors.push_back({"model", {}, "`dscore run` needs a \"model\" section, e.g. "
                                            "\"model\": {\"type\": \"mlp\"}"});
  if (!cfg.optimizer)
    loaded->errors.push_back({"optimizer", {}, "`dscore run` needs an \"optimizer\" section, "
                                                "e.g. \"optimizer\": {\"type\": \"Adam\", "
                                                "\"params\": {\"lr\": 0.001}}"});
  if (cfg.train_steps <= 0)
    loaded->errors.push_back({"train_steps", {}, "`dscore run` needs the number of optimizer "
                                                  "steps: set \"train_steps\" or pass --steps N"});
}

std::string momentum_text(const SelectedPlugin& optimizer) {
  const json::Value* betas = optimizer.params.values().find("betas");
  if (betas == nullptr || !betas->is_array()) return "";
  std::vector<std::string> parts;
  for (const json::Value& b : betas->items()) parts.push_back(format_double(b.as_number()));
  return "(" + join(parts, ", ") + ")";
}

}  // namespace

int run_training(const RunOptions& options) {
  plugin_host::install_crash_handler();
  if (options.ranks != 1) {
    log_error("-n " + std::to_string(options.ranks) +
              ": this dscore build runs one rank (multi-rank ZeRO arrives with the ZeRO engine); "
              "use -n 1");
    return kExitConfigError;
  }
  config::ResolveContext context;
  context.world_size = options.ranks;
  context.train_steps = options.steps;
  config::LoadedConfig loaded = config::load_config_file(options.config_path, context);
  if (!loaded.ok()) return print_config_errors(loaded);

  const std::string config_dir =
      std::filesystem::absolute(options.config_path).parent_path().string();
  auto registry = plugin_host::PluginRegistry::open(
      plugin_host::SearchPath::standard(loaded.config->plugin_paths, config_dir));
  if (!registry.ok()) return fail(registry.status());

  require_run_sections(&loaded);
  PluginSelection selection = select_plugins(&loaded, **registry, context);
  if (!loaded.ok()) return print_config_errors(loaded);
  for (const config::ConfigNotice& n : loaded.notices) log_info(n.path + ": " + n.message);

  const config::TrainingConfig& cfg = *loaded.config;
  plugin_host::InstanceContext instance_context;
  instance_context.seed = cfg.seed;

  EngineComponents components;
  auto model = plugin_host::ModelInstance::create(*selection.model->info, selection.model->params,
                                                  instance_context);
  if (!model.ok()) return fail(model.status());
  components.model = make_plugin_model(std::move(*model));
  auto optimizer = plugin_host::OptimizerInstance::create(
      *selection.optimizer->info, selection.optimizer->params, instance_context);
  if (!optimizer.ok()) return fail(optimizer.status());
  components.optimizer = std::move(*optimizer);
  components.base_lr = optimizer_base_lr(*selection.optimizer);
  if (selection.scheduler) {
    auto scheduler = plugin_host::SchedulerInstance::create(
        *selection.scheduler->info, selection.scheduler->params, instance_context,
        {components.base_lr}, cfg.train_steps);
    if (!scheduler.ok()) return fail(scheduler.status());
    components.scheduler = std::move(*scheduler);
  }
  const std::string resolved_json = json::serialize(loaded.resolved);
  for (const SelectedPlugin& m : selection.monitors) {
    auto monitor = plugin_host::MonitorInstance::create(*m.info, m.params, instance_context);
    if (!monitor.ok()) return fail(monitor.status());
    if (Status st = (*monitor)->write_config(resolved_json); !st.ok()) return fail(st);
    components.monitors.push_back(std::move(*monitor));
  }

  auto engine = Engine::create(cfg, std::move(components));
  if (!engine.ok()) return fail(engine.status());
  Engine& e = **engine;
  auto source = data::make_batch_source(cfg.data, e.model(), cfg.seed);
  if (!source.ok()) return fail(source.status());

  log_info("training " + e.model().display_name() + ": " +
           std::to_string(e.layout().total_numel()) + " parameters, " +
           std::to_string(cfg.train_steps) + " steps, batch " +
           std::to_string(cfg.batch.train_batch_size) + " (micro " +
           std::to_string(cfg.batch.train_micro_batch_size_per_gpu) + " x gas " +
           std::to_string(cfg.batch.gradient_accumulation_steps) + ")");

  const data::DistributedSampler sampler(cfg.batch, /*world_size=*/1, /*rank=*/0);
  data::HostBatch batch(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  ProgressReporter progress(cfg.train_steps, cfg.steps_per_print, options.progress_bar);
  const std::string mom = momentum_text(*selection.optimizer);
  ProgressSnapshot snapshot;
  snapshot.total_steps = cfg.train_steps;
  for (int64_t step = 0; step < cfg.train_steps; ++step) {
    for (int64_t micro = 0; micro < cfg.batch.gradient_accumulation_steps; ++micro) {
      if (Status st = (*source)->fill(sampler.micro_batch(step, micro), &batch); !st.ok())
        return fail(st);
      if (auto loss = e.forward_backward(batch.view()); !loss.ok()) return fail(loss.status());
      if (Status st = e.step(); !st.ok()) return fail(st);
    }
    snapshot.step = e.global_steps();
    snapshot.loss = e.last_loss();
    snapshot.samples = e.global_samples();
    snapshot.skipped = e.skipped_steps();
    const std::vector<double> lrs = e.get_lr();
    snapshot.lr = lrs.empty() ? 0 : lrs[0];
    progress.update(snapshot, lrs, mom);
  }
  progress.finish(snapshot);
  return 0;
}

}  // namespace dscore
