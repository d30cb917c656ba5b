// The remaining DeepSpeed sections: activation checkpointing, flops
// profiler, monitors (docs/deepspeed-reference.md#monitors), comms_logger (#comms-logger),
// checkpoint, timers, hybrid_engine, pipeline, progressive_layer_drop, elasticity, nebula, and the
// sections DeepSpeed only names (accepted with any keys, reported as not used by dscore).
#include "core/config/schema_builder.h"

namespace dscore::config {

using T = FieldType;

namespace {

F optional_string(const std::string& name, const std::string& doc) {
  return F(name, T::kString, doc).nullable();
}

std::vector<FieldSpec> monitor_sections() {
  auto output = [](const std::string& what) {
    return std::vector<FieldSpec>{
        F("enabled", T::kBool, "write " + what).def(false),
        F("output_path", T::kString, "parent folder of the output (\"\" = current folder)").def(""),
        F("job_name", T::kString, "subfolder under output_path").def("DeepSpeedJobName"),
    };
  };
  // An enabled section is the monitor plugin of the section's name.
  auto monitor_section = [](const json::Value& v, const std::string& path, TrainingConfig& c) {
    add_monitor_section(v, path, &c.monitors);
  };
  auto wandb = make_object(
      {
          F("enabled", T::kBool, "log to Weights & Biases (an offline run folder)").def(false),
          optional_string("group", "run group"),
          optional_string("team", "entity"),
          F("project", T::kString, "project name").def("deepspeed"),
          // dscore only (not a DeepSpeed key): wandb.init's `dir`, since the
          // monitor writes an offline run folder rather than streaming.
          optional_string("dir",
                          "dscore only: the offline run goes to dir/wandb/ (default: $WANDB_DIR, "
                          "else the current folder, as wandb.init)"),
      },
      "Weights & Biases", {.pydantic = true});
  auto comet = make_object(
      {
          F("enabled", T::kBool, "log to Comet").def(false),
          F("samples_log_interval", T::kInt, "samples between logs of the same metric")
              .def(100)
              .min(0),
          optional_string("project", "project"),
          optional_string("workspace", "workspace"),
          optional_string("api_key", "API key"),
          optional_string("experiment_name", "experiment name"),
          optional_string("experiment_key", "experiment key"),
          F("online", T::kBool, "online mode").nullable(),
          optional_string("mode", "Comet mode"),
      },
      "Comet", {.pydantic = true});
  return {
      F("tensorboard", T::kObject, "TensorBoard event files (monitor plugin \"tensorboard\")")
          .nullable()
          .object(make_object(output("TensorBoard event files"), "TensorBoard", {.pydantic = true}))
          .read<TrainingConfig>(monitor_section),
      F("csv_monitor", T::kObject, "one CSV file per metric (monitor plugin \"csv_monitor\")")
          .nullable()
          .object(make_object(output("CSV files"), "CSV monitor", {.pydantic = true}))
          .read<TrainingConfig>(monitor_section),
      F("wandb", T::kObject, "Weights & Biases (monitor plugin \"wandb\")")
          .nullable()
          .object(wandb)
          .read<TrainingConfig>(monitor_section),
      F("comet", T::kObject, "Comet (monitor plugin \"comet\")")
          .nullable()
          .object(comet)
          .read<TrainingConfig>(monitor_section),
      F("comms_logger", T::kObject,
        "communication logging; DeepSpeed enables it by the key's mere presence")
          .nullable()
          .object(make_object(
              {
                  F("enabled", T::kBool, "(DeepSpeed never reads it: presence enables the logger)")
                      .def(false)
                      .to(&CommsLoggerConfig::enabled),
                  F("prof_all", T::kBool, "profile every collective")
                      .def(true)
                      .to(&CommsLoggerConfig::prof_all),
                  F("prof_ops", T::kStringArray, "collectives to profile by name")
                      .def(json::Value::array())
                      .to(&CommsLoggerConfig::prof_ops),
                  F("verbose", T::kBool, "one line per collective")
                      .def(false)
                      .to(&CommsLoggerConfig::verbose),
                  F("debug", T::kBool, "add the calling function to record names")
                      .def(false)
                      .to(&CommsLoggerConfig::debug),
              },
              "communication logger (docs/deepspeed-reference.md#comms-logger)",
              {.pydantic = true}))
          .to(&TrainingConfig::comms_logger),
  };
}

std::vector<FieldSpec> engine_sections() {
  return {
      F("activation_checkpointing", T::kObject,
        "activation checkpointing; its presence turns recomputation on in models that support it")
          .nullable()
          .object(make_object(
              {
                  F("partition_activations", T::kBool, "partition checkpointed activations")
                      .def(false)
                      .to(&ActivationCheckpointingConfig::partition_activations),
                  F("number_checkpoints", T::kInt,
                    "blocks checkpointed (the first ones; absent = all)")
                      .nullable()
                      .to(&ActivationCheckpointingConfig::number_checkpoints),
                  F("contiguous_memory_optimization", T::kBool, "copy checkpoints into one buffer")
                      .def(false)
                      .to(&ActivationCheckpointingConfig::contiguous_memory_optimization),
                  F("cpu_checkpointing", T::kBool, "keep checkpoints in CPU memory")
                      .def(false)
                      .to(&ActivationCheckpointingConfig::cpu_checkpointing),
                  F("profile", T::kBool, "time checkpoint functions")
                      .def(false)
                      .to(&ActivationCheckpointingConfig::profile),
                  F("synchronize_checkpoint_boundary", T::kBool,
                    "synchronize at checkpoint boundaries")
                      .def(false)
                      .to(&ActivationCheckpointingConfig::synchronize_checkpoint_boundary),
              },
              "activation checkpointing"))
          .to(&TrainingConfig::activation_checkpointing),
      F("flops_profiler", T::kObject, "DeepSpeed's flops profiler")
          .nullable()
          .object(make_object(
              {
                  F("enabled", T::kBool, "profile one step")
                      .def(false)
                      .to(&FlopsProfilerConfig::enabled),
                  F("recompute_fwd_factor", T::kNumber, "forward recomputation factor")
                      .def(0.0)
                      .to(&FlopsProfilerConfig::recompute_fwd_factor),
                  F("profile_step", T::kInt, "step to profile")
                      .def(1)
                      .to(&FlopsProfilerConfig::profile_step),
                  F("module_depth", T::kInt, "depth of the module tree to print")
                      .def(-1)
                      .to(&FlopsProfilerConfig::module_depth),
                  F("top_modules", T::kInt, "modules listed")
                      .def(1)
                      .to(&FlopsProfilerConfig::top_modules),
                  F("detailed", T::kBool, "detailed profile")
                      .def(true)
                      .to(&FlopsProfilerConfig::detailed),
                  optional_string("output_file", "write the profile here")
                      .to(&FlopsProfilerConfig::output_file),
              },
              "flops profiler"))
          .to(&TrainingConfig::flops_profiler),
      F("checkpoint", T::kObject, "checkpoint behaviour")
          .def(json::Value::object())
          .object(make_object(
              {
                  F("tag_validation", T::kString,
                    "check tags agree across ranks: WARN, IGNORE or FAIL (any case)")
                      .def("WARN")
                      .enums({"WARN", "IGNORE", "FAIL"}, true)
                      .enum_message(
                          "Checkpoint config contains invalid tag_validation value of {}, "
                          "expecting one of ['WARN', 'IGNORE', 'FAIL']")
                      .to(&CheckpointConfig::tag_validation),
                  F("load_universal", T::kBool, "load a universal checkpoint")
                      .def(false)
                      .to(&CheckpointConfig::load_universal),
                  F("use_node_local_storage", T::kBool, "every node writes its own copy")
                      .def(false)
                      .to(&CheckpointConfig::use_node_local_storage),
                  F("parallel_write", T::kObject, "parallel checkpoint writing")
                      .nullable()
                      .object(make_object(
                          {F("pipeline_stage", T::kBool, "write per pipeline stage").def(false)},
                          "parallel write")),
              },
              "checkpoints"))
          .to(&TrainingConfig::checkpoint),
      F("timers", T::kObject, "throughput timer")
          .nullable()
          .object(make_object(
              {F("throughput", T::kObject, "throughput timer")
                   .nullable()
                   .object(make_object(
                       {
                           F("enabled", T::kBool, "measure throughput").def(true),
                           F("synchronized", T::kBool, "synchronize the device before timing")
                               .def(true),
                       },
                       "throughput timer", {.pydantic = true}))},
              "timers", {.pydantic = true})),
  };
}

std::vector<FieldSpec> unused_sections() {
  auto named = [](const std::string& name, const std::string& doc) {
    return F(name, T::kObject, doc + ", accepted with any keys")
        .nullable()
        .not_used()
        .object(make_object({}, doc, {.allow_unknown = true, .quiet_unknown = true}));
  };
  return {
      F("hybrid_engine", T::kObject, "RLHF hybrid engine")
          .nullable()
          .not_used()
          .object(make_object(
              {
                  F("enabled", T::kBool, "enable").def(false),
                  F("max_out_tokens", T::kInt, "generation length").def(512),
                  F("inference_tp_size", T::kInt, "inference tensor parallelism").def(1),
                  F("release_inference_cache", T::kBool, "free the KV cache after generation")
                      .def(false),
                  F("pin_parameters", T::kBool, "pin parameters").def(true),
                  F("tp_gather_partition_size", T::kInt, "gather partition size").def(8),
              },
              "hybrid engine", {.pydantic = true})),
      F("pipeline", T::kObject, "pipeline parallelism")
          .nullable()
          .not_used()
          .object(make_object(
              {
                  F("stages", T::kJson, "pipeline stages: an int or \"auto\"").def("auto"),
                  F("partition", T::kString, "layer partition method").def("best"),
                  F("seed_layers", T::kBool, "seed each layer").def(false),
                  F("activation_checkpoint_interval", T::kInt, "layers between checkpoints").def(0),
                  F("pipe_partitioned", T::kBool, "partition pipeline activations").def(true),
                  F("grad_partitioned", T::kBool, "partition pipeline gradients").def(true),
              },
              "pipeline")),
      F("progressive_layer_drop", T::kObject, "progressive layer dropping")
          .nullable()
          .not_used()
          .object(make_object(
              {
                  F("enabled", T::kBool, "enable").def(false),
                  F("theta", T::kNumber, "final keep probability").def(1.0),
                  F("gamma", T::kNumber, "decay rate").def(0.001),
              },
              "progressive layer drop")),
      F("elasticity", T::kObject,
        "elastic training (enabled is an error: dscore does not implement it)")
          .nullable()
          .not_used()
          .object(make_object(
              {
                  F("enabled", T::kBool, "enable (an error in dscore)").def(false),
                  F("max_train_batch_size", T::kInt, "largest global batch").def(2000),
                  F("micro_batch_sizes", T::kNumberArray, "acceptable micro-batch sizes").def([] {
                    json::Value a = json::Value::array();
                    for (int v : {2, 4, 6}) a.push_back(json::Value(v));
                    return a;
                  }()),
                  F("min_gpus", T::kInt, "fewest GPUs").def(1),
                  F("max_gpus", T::kInt, "most GPUs").def(10000),
                  F("min_time", T::kInt, "minimum run time").def(0),
                  F("prefer_larger_batch", T::kBool, "prefer the larger batch").def(true),
                  F("ignore_non_elastic_batch_info", T::kBool, "ignore the batch keys").def(false),
                  F("num_gpus_per_node", T::kInt, "GPUs per node").def(1),
                  F("model_parallel_size", T::kInt, "model-parallel size").def(1),
              },
              "elasticity (other DeepSpeed keys such as \"version\" are accepted)",
              {.allow_unknown = true})),
      F("nebula", T::kObject, "Azure Nebula checkpointing")
          .nullable()
          .not_used()
          .object(make_object(
              {
                  F("enabled", T::kBool, "enable").def(false),
                  F("enable_nebula_load", T::kBool, "load through nebula").def(true),
                  optional_string("nebula_load_path", "load path"),
                  optional_string("persistent_storage_path", "storage path"),
                  F("persistent_time_interval", T::kInt, "seconds between persists").def(100),
                  F("num_of_version_in_retention", T::kInt, "versions kept").def(2),
              },
              "nebula")),
      named("sparse_attention", "sparse attention"),
      named("eigenvalue", "eigenvalue computation"),
      named("autotuning", "DeepSpeed autotuning"),
      named("compression_training", "compression training"),
      named("data_efficiency", "data efficiency"),
      named("curriculum_learning", "legacy curriculum learning"),
      named("tensor_parallel", "tensor parallelism"),
      named("weight_quantization", "weight quantization"),
  };
}

}  // namespace

void add_other_sections(std::vector<FieldSpec>* fields) {
  for (auto group : {engine_sections(), monitor_sections(), unused_sections()})
    for (FieldSpec& f : group) fields->push_back(std::move(f));
}

}  // namespace dscore::config
