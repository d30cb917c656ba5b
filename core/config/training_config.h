// The validated, resolved ds_config.json as typed values: what the engine,
// the plugin host and the CLI read. Built by load_config() (config.h) from
// the JSON after schema validation, deprecation mapping, alias
// canonicalisation, "auto" resolution and the batch-triad derivation.
// Field names follow DeepSpeed's keys; defaults are DeepSpeed's
// (docs/deepspeed-reference.md#configuration) unless a comment says otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config/json.h"

namespace dscore::config {

// A section that names a plugin: {"type": ..., "params": {...}} (optimizer,
// scheduler), a monitor section, or the "model" section.
struct PluginRef {
  std::string type;               // the plugin name as written (matched case-insensitively)
  json::Value params;             // an object: the params as written, "auto" NOT yet resolved
                                  // (the plugin's own schema resolves it)
  std::string params_path;        // JSON path of params for messages: "optimizer.params"
  json::Location location;        // where the section starts
};

struct BatchConfig {
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
};

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0;          // 0 = dynamic
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  bool fp16_master_weights_and_grads = false;
  // True when at least one of the five dynamic-scaling keys was given; when false each loss scaler
  // uses its own defaults (docs/deepspeed-reference.md#loss-scaler-defaults).
  bool dynamic_args_given = false;
};

struct Bf16Config {
  bool enabled = false;
  bool immediate_grad_update = false;
};

struct OffloadConfig {
  std::string device = "none";    // none | cpu | nvme
  std::string nvme_path;
  int64_t buffer_count = 4;       // offload_param: 5
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  bool pin_memory = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
};

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;   // elements
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;                // resolved: True for stage 3 when not given
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  std::optional<OffloadConfig> offload_param;
  std::optional<OffloadConfig> offload_optimizer;
  int64_t sub_group_size = 1000000000;
  int64_t prefetch_bucket_size = 50000000;
  int64_t param_persistence_threshold = 100000;
  int64_t model_persistence_threshold = INT64_MAX;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  bool gather_16bit_weights_on_model_save = false;
  bool ignore_unused_parameters = true;
  bool round_robin_gradients = false;
};

struct ActivationCheckpointingConfig {
  bool present = false;  // the section is given: models that support it recompute activations
  bool partition_activations = false;
  std::optional<int64_t> number_checkpoints;
  bool contiguous_memory_optimization = false;
  bool cpu_checkpointing = false;
  bool profile = false;
  bool synchronize_checkpoint_boundary = false;
};

struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;
  int64_t module_depth = -1;
  int64_t top_modules = 1;
  bool detailed = true;
  std::string output_file;  // "" = print
  double recompute_fwd_factor = 0;
};

struct CommsLoggerConfig {
  bool present = false;  // DeepSpeed enables the logger by the key's mere presence
  bool enabled = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;
  bool verbose = false;
  bool debug = false;
};

struct CheckpointConfig {
  std::string tag_validation = "WARN";  // WARN | IGNORE | FAIL (upper-cased)
  bool load_universal = false;
  bool use_node_local_storage = false;
};

// dscore's "data" section: where batches come from.
struct DataConfig {
  std::string type = "synthetic";  // synthetic (the model's own task) | text | tokens
  std::string path;                // for text / tokens: a file or a glob pattern
  bool shuffle = true;             // text / tokens: a seeded order per epoch, else file order
};

// dscore's "comm" section.
struct CommConfig {
  std::string backend = "auto";    // auto: "mpi" when launched with several ranks, else "local"
  int64_t timeout_ms = 300000;     // every collective's deadline
};

struct TrainingConfig {
  // --- DeepSpeed keys
  BatchConfig batch;
  int64_t steps_per_print = 0;     // 0 = DeepSpeed's None: no step lines
  std::optional<PluginRef> optimizer;
  std::optional<PluginRef> scheduler;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  Fp16Config fp16;
  Bf16Config bf16;
  double gradient_clipping = 0.0;  // 0 = off
  std::optional<std::string> communication_data_type;  // fp32 | fp16 | bf16 (lower case)
  std::optional<std::string> grad_accum_dtype;         // data_types.grad_accum_dtype
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool dataloader_drop_last = false;
  ZeroConfig zero;
  ActivationCheckpointingConfig activation_checkpointing;
  json::Value aio;                 // the resolved "aio" section (offload plugins' params)
  CommsLoggerConfig comms_logger;
  FlopsProfilerConfig flops_profiler;
  CheckpointConfig checkpoint;
  // Enabled monitors, one per enabled section ("csv_monitor", "tensorboard",
  // "wandb") plus plugins.monitors; params exclude "enabled".
  std::vector<PluginRef> monitors;

  // --- dscore keys
  std::optional<PluginRef> model; // "model": {"type": ..., params...}
  DataConfig data;
  std::vector<std::string> plugin_paths;  // "plugins": {"paths": [...]}
  CommConfig comm;
  int64_t train_steps = 0;        // optimizer steps `dscore run` performs (0 = not set)
  std::string checkpoint_dir;
  int64_t save_interval = 0;      // `dscore run` saves every N steps and at the end (0 = off)
  uint64_t seed = 42;             // dscore: seeds parameter init, synthetic data, data.shuffle

  json::Value resolved;           // the whole resolved config (checkpoints keep a copy)
};

}  // namespace dscore::config
