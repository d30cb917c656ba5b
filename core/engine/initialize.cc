#include "core/engine/initialize.h"

#include <filesystem>

#include "core/base/logging.h"
#include "core/comm/job_store.h"
#include "core/comm/topology.h"
#include "core/device/select.h"
#include "core/plugin_host/trust.h"

namespace dscore {
namespace {

Result<Setup> finish_prepare(config::LoadedConfig loaded, const std::string& config_dir,
                             const config::ResolveContext& context,
                             const InitializeOptions& options, const comm::JobEnv& job) {
  Setup setup;
  setup.options = options;
  setup.job = job;
  setup.loaded = std::move(loaded);
  if (!setup.loaded.ok()) return setup;
  DSCORE_RETURN_IF_ERROR(plugin_host::check_config_plugin_paths(
      setup.loaded.config->plugin_paths, config_dir,
      options.trust_config_plugin_paths || options.environment.trust_config_plugin_paths));
  auto registry = plugin_host::PluginRegistry::open(
      plugin_host::SearchPath::standard(setup.loaded.config->plugin_paths, config_dir));
  if (!registry.ok()) return registry.status();
  setup.registry = *registry;
  if (options.own_model) setup.loaded.config->model.reset();
  setup.selection = select_plugins(&setup.loaded, *setup.registry, context);
  return setup;
}

// The device "device" names (core/device/select.h). The engine trains on
// the CPU only so far (config/run_rules.h refuses "cuda" without the
// opt-in), so "auto" means the CPU even where a GPU is visible, and says so.
Result<std::unique_ptr<device::Device>> open_device(const std::string& requested, int local_rank,
                                                    const EngineEnvironment& environment,
                                                    bool log) {
  DSCORE_ASSIGN_OR_RETURN(device::CpuStreams streams,
                          device::cpu_streams_named(environment.cpu_streams));
  DSCORE_ASSIGN_OR_RETURN(device::CpuMemory memory,
                          device::cpu_memory_named(environment.cpu_device_memory));
  if (requested == "auto" && device::visible_cuda_devices() > 0 && log)
    log_info(
        "device: a CUDA GPU is visible, but the engine does not train on CUDA yet: "
        "computing on the CPU");
  return device::select_device(requested == "auto" ? "cpu" : requested, local_rank, streams,
                               memory);
}

Result<comm::JobEnv> job_of(const InitializeOptions& options) {
  if (options.job) return *options.job;
  return comm::detect_job_env();
}

config::ResolveContext context_of(const InitializeOptions& options, const comm::JobEnv& job) {
  config::ResolveContext context;
  context.world_size = job.world_size;  // the data-parallel size of the batch triad
  context.train_steps = options.train_steps;
  context.allow_unsupported = options.allow_unsupported;
  return context;
}

}  // namespace

InitializeOptions options_with_environment() {
  InitializeOptions options;
  options.environment = read_engine_environment();
  return options;
}

Result<Setup> prepare(const std::string& config_path, const InitializeOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(comm::JobEnv job, job_of(options));
  const config::ResolveContext context = context_of(options, job);
  const std::string dir = std::filesystem::absolute(config_path).parent_path().string();
  return finish_prepare(config::load_config_file(config_path, context), dir, context, options, job);
}

Result<Setup> prepare_text(std::string_view config_json, std::string_view source_name,
                           const std::string& config_dir, const InitializeOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(comm::JobEnv job, job_of(options));
  const config::ResolveContext context = context_of(options, job);
  return finish_prepare(config::load_config_text(config_json, source_name, context), config_dir,
                        context, options, job);
}

namespace {

// The model's params as this rank creates it: under tensor parallelism
// (plugin_setup.cc set tensor_parallel_size) its part of each split
// tensor, "tensor_parallel_rank" (its place in its tensor-parallel group:
// consecutive ranks, topology.h); under sequence parallelism
// "sequence_parallel_rank", its part of each sample's sequence; under
// expert parallelism "expert_parallel_rank", which experts it holds. Empty
// params: the selection's as they are.
Result<plugin_host::ValidatedParams> model_params_for_rank(const SelectedPlugin& model,
                                                           const config::TrainingConfig& cfg,
                                                           const comm::JobEnv& job) {
  const int tp = static_cast<int>(config::tensor_parallel_size_of(cfg));
  const int sp = static_cast<int>(config::sequence_parallel_size_of(cfg));
  const int ep = static_cast<int>(config::expert_parallel_size_of(cfg));
  if (tp <= 1 && sp <= 1 && ep <= 1) return plugin_host::ValidatedParams{};
  DSCORE_ASSIGN_OR_RETURN(
      const comm::ParallelGrid grid,
      comm::ParallelGrid::pipe_data_expert_sequence_model(
          static_cast<int>(config::pipeline_stages_of(cfg)), ep, sp, tp, job.world_size));
  json::Value values = model.params.values();
  if (tp > 1)
    values.set(
        "tensor_parallel_rank",
        json::Value(static_cast<int64_t>(grid.rank_in_group(comm::groups::kModel, job.rank))));
  if (sp > 1)
    values.set(
        "sequence_parallel_rank",
        json::Value(static_cast<int64_t>(grid.rank_in_group(comm::groups::kSequence, job.rank))));
  if (ep > 1)
    values.set(
        "expert_parallel_rank",
        json::Value(static_cast<int64_t>(grid.rank_in_group(comm::groups::kExpert, job.rank))));
  auto schema = config::parse_params_schema(model.info->params_schema);
  if (!schema.ok()) return schema.status();
  return plugin_host::ValidatedParams::from_object(values, values, &*schema);
}

}  // namespace

Result<std::unique_ptr<Engine>> build_engine(const Setup& setup, std::unique_ptr<Model> model) {
  DSCORE_CHECK(setup.loaded.ok(), "build_engine on a config with errors");
  const config::TrainingConfig& cfg = *setup.loaded.config;
  const PluginSelection& selection = setup.selection;
  // One host context for everything this engine creates. Its store: the
  // caller's (ranks as threads), else the job's across processes (several
  // ranks; opened on first use), else one of its own.
  auto host = std::make_shared<plugin_host::HostContext>(
      setup.options.kv_store ? setup.options.kv_store
                             : comm::make_job_kv(setup.job, cfg.comm.timeout_ms));
  // From here this thread works for the engine: its rank on the log lines,
  // its buffers in its ledger (engine_scope.h).
  host->set_log_rank(setup.job.rank, setup.job.world_size);
  EngineScope scope(host->identity());
  plugin_host::InstanceContext context;
  context.seed = cfg.seed;
  context.rank = setup.job.rank;
  context.world_size = setup.job.world_size;
  context.local_rank = setup.job.local_rank;
  context.host = host;

  // The communicator first: creating it is the job's first collective.
  DSCORE_ASSIGN_OR_RETURN(auto communicator, comm::Communicator::create(*setup.registry, cfg.comm,
                                                                        setup.job, cfg.seed, host));
  // DeepSpeed turns the comms logger on by the key's mere presence.
  if (cfg.comms_logger.present) {
    observability::CommsLoggerConfig logger;
    logger.prof_all = cfg.comms_logger.prof_all;
    logger.prof_ops = cfg.comms_logger.prof_ops;
    logger.verbose = cfg.comms_logger.verbose;
    logger.debug = cfg.comms_logger.debug;
    communicator->enable_comms_logger(logger);
  }

  EngineComponents components;
  if (model) {
    components.model = std::move(model);
  } else {
    if (!selection.model)
      return invalid_argument(
          "no model: add a \"model\" section (e.g. {\"type\": \"mlp\"}) or "
          "pass a Model to initialize()");
    DSCORE_ASSIGN_OR_RETURN(plugin_host::ValidatedParams params,
                            model_params_for_rank(*selection.model, cfg, setup.job));
    DSCORE_ASSIGN_OR_RETURN(
        auto instance,
        plugin_host::ModelInstance::create(
            *selection.model->info, params.size() > 0 ? params : selection.model->params, context));
    components.model = make_plugin_model(std::move(instance));
  }
  if (!selection.optimizer)
    return invalid_argument(
        "no optimizer: add an \"optimizer\" section, e.g. \"optimizer\": "
        "{\"type\": \"Adam\", \"params\": {\"lr\": 0.001}}");
  DSCORE_ASSIGN_OR_RETURN(components.optimizer,
                          plugin_host::OptimizerInstance::create(
                              *selection.optimizer->info, selection.optimizer->params, context));
  components.base_lr = optimizer_base_lr(*selection.optimizer);
  if (selection.scheduler) {
    DSCORE_ASSIGN_OR_RETURN(components.scheduler,
                            plugin_host::SchedulerInstance::create(
                                *selection.scheduler->info, selection.scheduler->params, context,
                                {components.base_lr}, cfg.train_steps > 0 ? cfg.train_steps : -1));
  }
  // Only global rank 0 writes monitor output (DeepSpeed does the same).
  const std::string resolved_json = json::serialize(setup.loaded.resolved);
  for (const SelectedPlugin& m : selection.monitors) {
    if (setup.job.rank != 0) break;
    DSCORE_ASSIGN_OR_RETURN(auto monitor,
                            plugin_host::MonitorInstance::create(*m.info, m.params, context));
    DSCORE_RETURN_IF_ERROR(monitor->write_config(resolved_json));
    components.monitors.push_back(std::move(monitor));
  }
  if (config::make_placement(cfg).uses_nvme()) {
    DSCORE_ASSIGN_OR_RETURN(components.swapper,
                            cfg.swapper
                                ? offload::make_swapper(*setup.registry, cfg.aio, context,
                                                        cfg.swapper->type, cfg.swapper->params)
                                : offload::make_swapper(*setup.registry, cfg.aio, context));
  }
  const EngineEnvironment& environment = setup.options.environment;
  if (setup.options.compute_threads.value_or(-1) != 0) {
    DSCORE_ASSIGN_OR_RETURN(
        ThreadBudget budget,
        thread_budget(setup.options.compute_threads, setup.job, environment.omp_num_threads));
    components.threads = std::make_unique<ComputeThreads>(budget.threads);
    log_info("compute threads: " + std::to_string(budget.threads) + " (" + budget.reason +
             "; dscore run --threads N or OMP_NUM_THREADS=N sets it)");
  }
  DSCORE_ASSIGN_OR_RETURN(components.device, open_device(cfg.device, setup.job.local_rank,
                                                         environment, setup.job.rank == 0));
  components.run.experimental_cuda_engine = environment.experimental_cuda_engine;
  if (setup.job.rank == 0) log_info("device: " + components.device->describe());
  components.comm = std::move(communicator);
  components.host = std::move(host);
  return Engine::create(cfg, std::move(components));
}

Result<std::unique_ptr<Engine>> initialize(const std::string& config_path,
                                           std::unique_ptr<Model> model,
                                           InitializeOptions options) {
  options.own_model = options.own_model || model != nullptr;
  DSCORE_ASSIGN_OR_RETURN(Setup setup, prepare(config_path, options));
  if (!setup.loaded.ok()) return invalid_argument(format_config_errors(setup.loaded));
  log_config_notices(setup.loaded);
  return build_engine(setup, std::move(model));
}

void log_config_notices(const config::LoadedConfig& loaded) {
  const std::string kWarning = "warning: ";
  for (const config::ConfigNotice& n : loaded.notices) {
    if (n.message.rfind(kWarning, 0) == 0)
      log_warning(n.path + ": " + n.message.substr(kWarning.size()));
    else
      log_info(n.path + ": " + n.message);
  }
}

std::string format_config_errors(const config::LoadedConfig& loaded) {
  std::string out;
  for (const config::ConfigError& e : loaded.errors) {
    if (!out.empty()) out += "\n";
    out += config::format_error(e, loaded.source_name);
  }
  return out;
}

}  // namespace dscore
