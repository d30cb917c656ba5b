#include "core/engine/plugin_setup.h"

#include "core/config/auto_rules.h"
#include "core/config/placement.h"
#include "core/config/schema.h"

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

// comm.backend names a comm plugin ("auto" picks one when the job starts).
// Only the name is checked here: the backend is created, with its params,
// by Communicator::create when the job starts.
void check_comm_backend(config::LoadedConfig* loaded, const plugin_host::PluginRegistry& registry) {
  const std::string& backend = loaded->config->comm.backend;
  if (backend == "auto") return;
  auto found = registry.find(DSCORE_KIND_COMM, backend);
  if (found.ok()) return;
  // The value's own position; the validated document keeps it.
  json::Location where;
  const json::Value* comm = loaded->resolved.find("comm");
  const json::Value* value = comm != nullptr ? comm->find("backend") : nullptr;
  if (value != nullptr) where = value->location;
  loaded->errors.push_back({"comm.backend", where, found.status().message()});
}

// DeepSpeed's activation_checkpointing section configures checkpointing
// that the model itself performs. A model that supports it declares the
// params "checkpoint_activations" (and "number_checkpoints"): the section's
// presence turns it on unless the model section sets it itself. For any
// other model the section has no effect, and a notice says so. A
// pipeline's activation_checkpoint_interval > 0 (DeepSpeed's PipelineModule
// checkpoints its layers in groups of that many) turns it on too: the gpt
// and llama checkpoint each block (docs/pipeline.md); a model that cannot
// is an error naming the key.
void with_activation_checkpointing(const config::TrainingConfig& cfg,
                                   const config::ObjectSpec& schema, config::PluginRef* ref,
                                   config::LoadedConfig* loaded) {
  const bool by_pipeline =
      config::pipeline_stages_of(cfg) > 1 && cfg.pipeline.activation_checkpoint_interval > 0;
  if (!cfg.activation_checkpointing.present && !by_pipeline) return;
  if (schema.find("checkpoint_activations") == nullptr) {
    if (by_pipeline)
      loaded->errors.push_back({"pipeline.activation_checkpoint_interval",
                                {},
                                "model '" + ref->type +
                                    "' does not checkpoint activations: set it to 0, or train a "
                                    "model that does (gpt, llama)"});
    else
      loaded->notices.push_back(
          {"activation_checkpointing", "model '" + ref->type +
                                           "' does not checkpoint activations; the "
                                           "section has no effect"});
    return;
  }
  if (ref->params.find("checkpoint_activations") == nullptr)
    ref->params.set("checkpoint_activations", json::Value(true));
  const auto& n = cfg.activation_checkpointing.number_checkpoints;
  if (n && ref->params.find("number_checkpoints") == nullptr &&
      schema.find("number_checkpoints") != nullptr)
    ref->params.set("number_checkpoints", json::Value(*n));
}

// One axis that splits the model's work: `size` ranks, asked for by the
// config key `config_key`. A model that can be split declares "<axis>_size"
// (and "<axis>_rank", which build_engine sets for each rank); the config
// sets the size, and a model that cannot be split is an error naming the key.
void with_split_axis(const std::string& axis, const std::string& what, int64_t size,
                     const std::string& config_key, const std::string& how,
                     const std::string& models, const config::ObjectSpec& schema,
                     config::PluginRef* ref, config::LoadedConfig* loaded) {
  const std::string size_key = axis + "_size";
  for (const std::string& key : {size_key, axis + "_rank"})
    if (ref->params.find(key) != nullptr)
      loaded->errors.push_back({"model." + key,
                                {},
                                key +
                                    " is set by the engine: remove it from the model section "
                                    "and give " +
                                    how});
  if (size <= 1) return;
  if (schema.find(size_key) == nullptr) {
    loaded->errors.push_back({config_key,
                              {},
                              "model '" + ref->type + "' cannot be split for " + what + ": set " +
                                  config_key + " to 1, or train a model that can (" + models +
                                  ")"});
    return;
  }
  ref->params.set(size_key, json::Value(size));
}

// tensor_parallel.autotp_size > 1 splits the model's layers;
// sequence_parallel_size > 1 splits each sample's sequence (Ulysses);
// expert_parallel.autoep_size > 1 spreads each MoE layer's experts.
void with_model_parallel(const config::TrainingConfig& cfg, const config::ObjectSpec& schema,
                         config::PluginRef* ref, config::LoadedConfig* loaded) {
  with_split_axis("tensor_parallel", "tensor parallelism", config::tensor_parallel_size_of(cfg),
                  "tensor_parallel.autotp_size", "\"tensor_parallel\": {\"autotp_size\": N}",
                  "gpt, gpt2, llama", schema, ref, loaded);
  with_split_axis("sequence_parallel", "sequence parallelism",
                  config::sequence_parallel_size_of(cfg), "sequence_parallel_size",
                  "\"sequence_parallel_size\": N at the top level", "gpt, gpt2, llama", schema, ref,
                  loaded);
  with_split_axis("expert_parallel", "expert parallelism", config::expert_parallel_size_of(cfg),
                  "expert_parallel.autoep_size",
                  "\"expert_parallel\": {\"enabled\": true, \"autoep_size\": N}", "gpt, llama",
                  schema, ref, loaded);
}

// A model that computes on either device declares "device". On the run's
// "device": "cuda" the engine lends the model views of GPU memory, so the
// model computes there too: unless its section names a device, the run's
// applies (with a notice), and "cpu" there is an error naming the fix.
void with_run_device(const config::TrainingConfig& cfg, const config::ObjectSpec& schema,
                     config::PluginRef* ref, config::LoadedConfig* loaded) {
  if (cfg.device != "cuda" || schema.find("device") == nullptr) return;
  const json::Value* device = ref->params.find("device");
  if (device == nullptr) {
    ref->params.set("device", json::Value(std::string("cuda")));
    loaded->notices.push_back({"model.device", "cuda, the run's \"device\""});
  } else if (device->is_string() && device->as_string() == "cpu") {
    loaded->errors.push_back(
        {"model.device",
         {},
         "\"cpu\", but the run's \"device\" is \"cuda\": the engine keeps the parameters in "
         "GPU memory, which the model's CPU backend cannot read; remove model.device (or set "
         "it to \"cuda\"), or set the run's \"device\": \"cpu\""});
  }
}

// A model that computes on CUDA in a type of its choosing declares
// "cuda_dtype". Unless the model section sets it, the run's precision does,
// as DeepSpeed computes in the type the model was cast to: "bf16" under
// bf16.enabled, "fp32" with neither fp16 nor bf16 on. fp16 keeps the model's
// own default (the CUDA kernels have no fp16). A notice says so when the
// model computes on CUDA.
void with_compute_dtype(const config::TrainingConfig& cfg, const config::ObjectSpec& schema,
                        config::PluginRef* ref, config::LoadedConfig* loaded) {
  if (cfg.fp16.enabled || schema.find("cuda_dtype") == nullptr ||
      ref->params.find("cuda_dtype") != nullptr)
    return;
  const std::string dtype = cfg.bf16.enabled ? "bf16" : "fp32";
  ref->params.set("cuda_dtype", json::Value(dtype));
  const json::Value* device = ref->params.find("device");
  if (device != nullptr && device->is_string() && device->as_string() == "cuda")
    loaded->notices.push_back(
        {"model.cuda_dtype", dtype + ", the run's precision (" +
                                 (cfg.bf16.enabled ? "bf16.enabled" : "no fp16 or bf16 section") +
                                 "); set model.cuda_dtype to choose"});
}

// The model section as the model plugin receives it: the
// activation_checkpointing section, the run's device and its precision
// applied to the params the model declares.
config::PluginRef model_ref(const config::TrainingConfig& cfg,
                            const plugin_host::PluginRegistry& registry,
                            config::LoadedConfig* loaded) {
  config::PluginRef ref = *cfg.model;
  auto found = registry.find(DSCORE_KIND_MODEL, ref.type);
  if (!found.ok()) return ref;  // select_one reports it
  auto schema = config::parse_params_schema((*found)->params_schema);
  if (!schema.ok()) return ref;  // select_one reports it
  with_activation_checkpointing(cfg, *schema, &ref, loaded);
  with_model_parallel(cfg, *schema, &ref, loaded);
  with_run_device(cfg, *schema, &ref, loaded);
  with_compute_dtype(cfg, *schema, &ref, loaded);
  return ref;
}

// On "device": "cuda" the engine lends the model device views and hands the
// optimizer CUDA tensors (unless its state is offloaded, when it steps host
// tensors): a plugin that does not declare DSCORE_CAP_CUDA would fail at the
// first step. Said at config time instead, naming the fixes.
void check_cuda_capabilities(const PluginSelection& selection, config::LoadedConfig* loaded) {
  const config::TrainingConfig& cfg = *loaded->config;
  if (cfg.device != "cuda") return;
  const auto on_cuda = [](const SelectedPlugin& p) {
    return (p.info->capabilities & DSCORE_CAP_CUDA) != 0;
  };
  if (selection.model && !on_cuda(*selection.model))
    loaded->errors.push_back(
        {"model.type", cfg.model->location,
         "model '" + cfg.model->type +
             "' computes on the CPU only (its plugin does not declare the cuda capability), "
             "but \"device\" is \"cuda\": set \"device\": \"cpu\", or use a model that computes "
             "on CUDA (gpt and llama in a build with CUDA; `dscore plugins list --json` shows each "
             "plugin's capabilities)"});
  if (selection.optimizer && !on_cuda(*selection.optimizer) &&
      !config::make_placement(cfg).optimizer_offloaded())
    loaded->errors.push_back(
        {"optimizer.type", cfg.optimizer->location,
         "optimizer '" + cfg.optimizer->type +
             "' steps CPU tensors only (its plugin does not declare the cuda capability), but "
             "\"device\" is \"cuda\" keeps its state on the GPU: use Adam, AdamW, FusedAdam, "
             "Lamb or FusedLamb, offload the optimizer state to the host "
             "(zero_optimization.offload_optimizer.device \"cpu\" at stage 1-3), or set "
             "\"device\": \"cpu\""});
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
    selection.model = select_one(loaded, registry, resolver, DSCORE_KIND_MODEL,
                                 model_ref(cfg, registry, loaded), "model");
  if (cfg.optimizer)
    selection.optimizer =
        select_one(loaded, registry, resolver, DSCORE_KIND_OPTIMIZER, *cfg.optimizer, "optimizer");
  if (cfg.scheduler)
    selection.scheduler =
        select_one(loaded, registry, resolver, DSCORE_KIND_SCHEDULER, *cfg.scheduler, "scheduler");
  for (const config::PluginRef& monitor : cfg.monitors) {
    // The section is where the params sit: "csv_monitor" (its keys are the
    // params) or "plugins.monitors[1]" (params under "params").
    std::string section = monitor.params_path;
    const std::string params_suffix = ".params";
    if (section.ends_with(params_suffix)) section.resize(section.size() - params_suffix.size());
    if (auto selected =
            select_one(loaded, registry, resolver, DSCORE_KIND_MONITOR, monitor, section))
      selection.monitors.push_back(std::move(*selected));
  }
  check_comm_backend(loaded, registry);
  check_cuda_capabilities(selection, loaded);
  return selection;
}

double optimizer_base_lr(const SelectedPlugin& optimizer) {
  for (const char* key : {"lr", "muon_lr"}) {
    const json::Value* lr = optimizer.params.values().find(key);
    if (lr != nullptr && lr->is_number()) return lr->as_number();
  }
  return 0.0;
}

}  // namespace dscore
