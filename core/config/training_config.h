// The validated, resolved ds_config.json as typed values: what the engine,
// the plugin host and the CLI read. Built by load_config() (config.h) from
// the JSON after schema validation, deprecation mapping, alias
// canonicalisation, "auto" resolution and the batch-triad derivation.
// Field names follow DeepSpeed's keys. Defaults live in the schema alone
// (deepspeed_schema*.cc, which also binds each key to its member here): the
// members below are only zero-initialised, so a value of 0 / "" / nullopt
// means the key is unset where the schema gives it no default.
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
  std::string type;         // the plugin name as written (matched case-insensitively)
  json::Value params;       // an object: the params as written, "auto" NOT yet resolved
                            // (the plugin's own schema resolves it)
  std::string params_path;  // JSON path of params for messages: "optimizer.params"
  json::Location location;  // where the section starts
};

struct BatchConfig {
  int64_t train_batch_size{};
  int64_t train_micro_batch_size_per_gpu{};
  int64_t gradient_accumulation_steps{};
};

struct Fp16Config {
  bool enabled{};
  bool auto_cast{};
  double loss_scale{};  // 0 = dynamic
  int64_t initial_scale_power{};
  int64_t loss_scale_window{};
  int64_t hysteresis{};
  bool consecutive_hysteresis{};
  double min_loss_scale{};
  bool
      fp16_master_weights_and_grads{};  // ZeRO 1-3 with offload: the fp16 parameters are the master
};

struct Bf16Config {
  bool enabled{};
  bool immediate_grad_update{};
  bool bf16_master_weights_and_grads{};  // ZeRO 1-3: the model's bf16 parameters are the master
  bool bf16_optimizer_states{};          // ... and the optimizer's state is kept in bf16
};

// offload_param / offload_optimizer "device" (placement.h decides what it
// means at each stage).
enum class OffloadDevice { kNone, kCpu, kNvme };
const char* offload_device_name(OffloadDevice device);  // "none", "cpu", "nvme"

// offload_param and offload_optimizer share this struct; a key only one of
// them has stays 0 in the other (buffer_size and max_in_cpu: offload_param;
// pipeline_read, pipeline_write, fast_init and ratio: offload_optimizer).
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count{};
  int64_t buffer_size{};
  int64_t max_in_cpu{};
  bool pin_memory{};
  bool pipeline_read{};
  bool pipeline_write{};
  bool fast_init{};
  double ratio = 1.0;  // of a section that is absent: nothing kept back
};

// The "aio" section (docs/deepspeed-reference.md#aio): how the nvme swapper
// plugin reads and writes. "auto" is resolved at load (auto_rules.h:
// measured for the disk, else the default).
struct AioConfig {
  int64_t block_size{};   // bytes per request
  int64_t queue_depth{};  // requests in flight
  int64_t intra_op_parallelism{};
  bool single_submit{};
  bool overlap_events{};
  // dscore: stale swap folders (core/offload/stale_swap.h) are reported,
  // not removed.
  bool keep_stale{};
};
// The schema's defaults, as a config without an "aio" section gets them
// (what tools that measure the disk start from).
AioConfig default_aio();
// The section as JSON: the nvme plugin's params, the io-bench cache's "aio".
json::Value aio_json(const AioConfig& aio);

struct ZeroConfig {
  int stage{};
  bool contiguous_gradients{};
  bool reduce_scatter{};
  int64_t reduce_bucket_size{};  // elements
  bool use_multi_rank_bucket_allreduce{};
  bool allgather_partitions{};
  int64_t allgather_bucket_size{};
  bool overlap_comm{};  // resolved: True for stage 3 when not given
  bool load_from_fp32_weights{};
  bool elastic_checkpoint{};
  std::optional<OffloadConfig> offload_param;
  std::optional<OffloadConfig> offload_optimizer;
  int64_t sub_group_size{};
  int64_t prefetch_bucket_size{};
  int64_t param_persistence_threshold{};
  int64_t model_persistence_threshold{};
  int64_t max_live_parameters{};
  int64_t max_reuse_distance{};
  bool gather_16bit_weights_on_model_save{};
  bool ignore_unused_parameters{};
  bool round_robin_gradients{};
  // ZeRO++ (stage 3): the secondary partition's group size (1: none), int8
  // weights in the parameter allgathers, int4 gradients in the reduction.
  int64_t hpz_partition_size{1};
  bool quantized_weights{};
  bool quantized_gradients{};
  // Not a config key: stage 3 reduce-scatters the pending layers'
  // gradients once this many elements (all ranks' together) are pending,
  // or reduce_bucket_size if fewer (zero/plan.h gradient_flush_elements),
  // so a reduction runs beside the backward and its send and receive
  // buffers stay small. Embedding code and tests may set it.
  int64_t reduce_flush_elements = int64_t{1} << 24;
};

struct ActivationCheckpointingConfig {
  bool present{};  // the section is given: models that support it recompute activations
  bool partition_activations{};
  std::optional<int64_t> number_checkpoints;
  bool contiguous_memory_optimization{};
  bool cpu_checkpointing{};
  bool profile{};
  bool synchronize_checkpoint_boundary{};
};

struct FlopsProfilerConfig {
  bool enabled{};
  int64_t profile_step{};
  int64_t module_depth{};
  int64_t top_modules{};
  bool detailed{};
  std::string output_file;  // "" = print
  double recompute_fwd_factor{};
};

// DeepSpeed's "autotuning" section, read by `dscore autotune`
// (core/autotune); `dscore run` leaves it alone. Filled when the section is
// given (`present`); `dscore autotune` adds an empty one for the defaults.
struct AutotuningConfig {
  bool present{};
  bool enabled{};
  bool fast{};
  std::string results_dir;
  std::string exps_dir;
  bool overwrite{};
  std::string metric;  // throughput | latency | flops
  int64_t start_profile_step{};
  int64_t end_profile_step{};
  std::string tuner_type;  // gridsearch | random | model_based
  int64_t tuner_early_stopping{};
  int64_t tuner_num_trials{};
  std::optional<int64_t> max_train_batch_size;
  int64_t min_train_batch_size{};
  int64_t max_train_micro_batch_size_per_gpu{};
  int64_t min_train_micro_batch_size_per_gpu{};
  int64_t num_tuning_micro_batch_sizes{};
  int64_t mp_size{};
};

struct CommsLoggerConfig {
  bool present{};  // DeepSpeed enables the logger by the key's mere presence
  bool enabled{};
  bool prof_all{};
  std::vector<std::string> prof_ops;
  bool verbose{};
  bool debug{};
};

struct CheckpointConfig {
  std::string tag_validation;  // WARN | IGNORE | FAIL (upper-cased)
  bool load_universal{};
  bool use_node_local_storage{};
};

// dscore's "data" section: where batches come from.
struct DataConfig {
  std::string type;  // synthetic (the model's own task) | text | tokens
  std::string path;  // for text / tokens: a file or a glob pattern
  bool shuffle{};    // text / tokens: a seeded order per epoch, else file order
};

// dscore's "comm" section.
struct CommConfig {
  std::string backend;   // auto: "mpi" when launched with several ranks, else "local"
  int64_t timeout_ms{};  // every collective's deadline
};

// The "pipeline" section (docs/pipeline.md): the stages and how the layers
// are cut. stages is 1 when neither "pipeline.stages" (an int; "auto" = 1)
// nor "pipeline_parallel_size" says otherwise (pipeline_stages_of()).
struct PipelineConfig {
  bool present{};
  int64_t stages{};  // 0: "auto"
  std::string partition;
  bool seed_layers{};
  int64_t activation_checkpoint_interval{};
  bool pipe_partitioned{};
  bool grad_partitioned{};
  // dscore: "1f1b" or "interleaved" (lower-cased); the chunks of
  // layers each stage holds under "interleaved" (1 under "1f1b").
  std::string schedule;
  int64_t virtual_stages = 1;
};

// DeepSpeed's "tensor_parallel" section (AutoTP training).
struct TensorParallelConfig {
  int64_t autotp_size{};  // 0 and 1: no tensor parallelism
};

// DeepSpeed's "expert_parallel" section (AutoEP): the expert axis.
struct ExpertParallelConfig {
  bool enabled{};
  int64_t autoep_size{1};
};

struct TrainingConfig {
  // --- DeepSpeed keys
  BatchConfig batch;
  int64_t steps_per_print{};  // 0 = DeepSpeed's None: no step lines
  std::optional<PluginRef> optimizer;
  std::optional<PluginRef> scheduler;
  bool zero_allow_untested_optimizer{};
  bool zero_force_ds_cpu_optimizer{};
  Fp16Config fp16;
  Bf16Config bf16;
  double gradient_clipping{};                          // 0 = off
  std::optional<std::string> communication_data_type;  // fp32 | fp16 | bf16 (lower case)
  std::optional<std::string> grad_accum_dtype;         // data_types.grad_accum_dtype
  bool prescale_gradients{};
  double gradient_predivide_factor{};
  bool wall_clock_breakdown{};
  bool memory_breakdown{};
  bool dataloader_drop_last{};
  ZeroConfig zero;
  ActivationCheckpointingConfig activation_checkpointing;
  AioConfig aio;
  CommsLoggerConfig comms_logger;
  FlopsProfilerConfig flops_profiler;
  CheckpointConfig checkpoint;
  AutotuningConfig autotuning;
  PipelineConfig pipeline;
  int64_t pipeline_parallel_size{};  // 0 = not set
  TensorParallelConfig tensor_parallel;
  int64_t sequence_parallel_size{};  // Ulysses; 0 and 1: none
  ExpertParallelConfig expert_parallel;
  // Enabled monitors, one per enabled section ("csv_monitor", "tensorboard",
  // "wandb") plus plugins.monitors; params exclude "enabled".
  std::vector<PluginRef> monitors;

  // --- dscore keys
  std::optional<PluginRef> model;  // "model": {"type": ..., params...}
  DataConfig data;
  std::vector<std::string> plugin_paths;  // "plugins": {"paths": [...]}
  // "plugins": {"swapper": {...}}: NVMe offload's I/O plugin; unset: "nvme".
  std::optional<PluginRef> swapper;
  CommConfig comm;
  std::string device;     // "auto", "cpu" or "cuda" (core/device)
  int64_t train_steps{};  // optimizer steps `dscore run` performs (0 = not set)
  std::string checkpoint_dir;
  int64_t save_interval{};  // `dscore run` saves every N steps and at the end (0 = off)
  uint64_t seed{};          // dscore: seeds parameter init, synthetic data, data.shuffle

  json::Value resolved;  // the whole resolved config (checkpoints keep a copy)
};

// The pipeline's stages: pipeline.stages, else pipeline_parallel_size,
// else 1 (a pipeline of one stage is no pipeline).
int64_t pipeline_stages_of(const TrainingConfig& config);
// The tensor-parallel size: tensor_parallel.autotp_size, at least 1.
int64_t tensor_parallel_size_of(const TrainingConfig& config);
// The Ulysses sequence-parallel size: sequence_parallel_size, at least 1.
int64_t sequence_parallel_size_of(const TrainingConfig& config);
// The expert-parallel size: expert_parallel.autoep_size when enabled, else 1.
int64_t expert_parallel_size_of(const TrainingConfig& config);

}  // namespace dscore::config
