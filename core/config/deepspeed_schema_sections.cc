// The remaining DeepSpeed sections: activation checkpointing, flops
// profiler, monitors (docs/deepspeed-reference.md#monitors), comms_logger (#comms-logger),
// checkpoint, timers, hybrid_engine, pipeline, progressive_layer_drop, elasticity, nebula, and the
// sections DeepSpeed only names (accepted with any keys, reported as not used by dscore).
#include <cctype>

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
                  F("use_node_local_storage", T::kBool,
                    "checkpoint_dir is each node's own disk: each node keeps its ranks' shards")
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

// DeepSpeed's "expert_parallel" section (AutoEP, 0.19.2): the size of the
// expert axis (docs/moe.md#expert-parallelism). AutoEP finds a Hugging Face
// model's MoE modules by pattern and replaces them; a dscore model plugin
// declares its experts itself, so the pattern keys are not used, and the
// keys that would change the routing's arithmetic are refused (the model's
// own moe_* / router keys say how it routes).
FieldSpec expert_parallel_section() {
  const auto routing = [](const char* name, T type, const char* doc) {
    return F(name, type, doc)
        .nullable()
        .unsupported(
            std::string("\"") + name + "\" changes how AutoEP's replacement layer routes tokens",
            "Remove the key: the model plugin routes as its own section says (the gpt's "
            "moe_* keys, the llama's num_experts_per_tok and norm_topk_prob)");
  };
  const auto pattern = [](const char* name, const char* doc) {
    return F(name, T::kJson, doc).nullable().not_used();
  };
  return F("expert_parallel", T::kObject,
           "expert parallelism: each MoE layer's experts spread over autoep_size ranks "
           "(docs/moe.md#expert-parallelism)")
      .nullable()
      .object(make_object(
          {
              F("enabled", T::kBool, "turn expert parallelism on")
                  .def(false)
                  .to(&ExpertParallelConfig::enabled),
              F("autoep_size", T::kInt,
                "ranks each MoE layer's experts are spread over (the expert-parallel group); "
                "a divisor of the data-parallel ranks and of the number of experts")
                  .def(1)
                  .min(1)
                  .to(&ExpertParallelConfig::autoep_size),
              F("expert_tensor_parallel_size", T::kInt, "tensor parallelism inside each expert")
                  .def(1)
                  .min(1)
                  .unsupported("\"expert_tensor_parallel_size\" splits each expert over "
                               "tensor-parallel ranks",
                               "Set it to 1 (each expert stays whole on its rank)"),
              pattern("preset_model",
                      "a built-in MoE model pattern (dscore: the model declares "
                      "its experts)"),
              pattern("moe_layer_pattern", "which modules are MoE layers"),
              pattern("expert_pattern", "which modules are the experts"),
              pattern("router_pattern", "which module is the router"),
              pattern("expert_w1", "the experts' first weight's attribute"),
              pattern("expert_w2", "the experts' second weight's attribute"),
              pattern("expert_w3", "the experts' third weight's attribute"),
              pattern("num_experts_attr", "the config attribute naming the experts' count"),
              pattern("top_k_attr", "the config attribute naming top-k"),
              pattern("has_shared_experts", "whether the layers have shared experts"),
              pattern("shared_experts_pattern", "which modules are shared experts"),
              pattern("shared_experts_gate_pattern", "which module gates the shared experts"),
              pattern("validate_folding_routing", "check the folded groups' routing"),
              pattern("use_grouped_mm", "grouped GEMM kernels for the experts"),
              pattern("disable_triton_grouped_mm", "turn Triton's grouped GEMM off"),
              pattern("score_apply", "where the router's scores multiply"),
              pattern("combine_impl", "how expert outputs are combined"),
              routing("route_norm", T::kJson, "renormalise the top-k probabilities"),
              F("route_scale", T::kNumber, "scale of the routing weights")
                  .def(1.0)
                  .unsupported("\"route_scale\" scales AutoEP's routing weights",
                               "Remove the key (or set 1.0)"),
              routing("num_expert_groups", T::kInt, "group-limited routing: expert groups"),
              routing("num_limited_groups", T::kInt, "group-limited routing: groups per token"),
              routing("score_func", T::kJson, "softmax or sigmoid scores (\"auto\": the model's)")
                  .def("auto"),
              routing("top_k", T::kJson, "experts per token (\"auto\": the model's)").def("auto"),
              routing("load_balance_coeff", T::kJson,
                      "auxiliary-loss-free balancing (DeepSpeed rejects any value)"),
              routing("routed_scaling_factor", T::kJson,
                      "scale of the routed output (\"auto\": the model's)")
                  .def("auto"),
          },
          "expert parallelism", {.pydantic = true}))
      .to(&TrainingConfig::expert_parallel);
}

std::vector<FieldSpec> unused_sections() {
  // A DeepSpeed section dscore only names: any keys; `what` and `fix` for
  // the unsupported-feature error when `switch_key` turns it on (empty: the
  // section's presence does).
  auto named = [](const std::string& name, const std::string& doc, const std::string& what,
                  const std::string& fix, const std::string& switch_key) {
    std::vector<FieldSpec> fields;
    if (!switch_key.empty())
      fields.push_back(F(switch_key, T::kBool, "turns the feature on").def(false));
    return F(name, T::kObject, doc + ", accepted with any keys")
        .nullable()
        .not_used()
        .unsupported(what, fix, switch_key)
        .object(
            make_object(std::move(fields), doc, {.allow_unknown = true, .quiet_unknown = true}));
  };
  const std::string kRemove = "Remove the section (or set \"enabled\": false)";
  // A section of a feature DeepSpeed has removed: rejected when given at all.
  auto gone = [](const std::string& name, const std::string& doc, const std::string& what,
                 const std::string& instead) {
    return F(name, T::kObject, doc + " (removed from DeepSpeed: an error)")
        .nullable()
        .removed(what, instead)
        .object(make_object({}, doc, {.allow_unknown = true, .quiet_unknown = true}));
  };
  return {
      F("hybrid_engine", T::kObject, "RLHF hybrid engine")
          .nullable()
          .not_used()
          .unsupported("\"hybrid_engine\" switches a DeepSpeed-Chat RLHF actor between training "
                       "and inference kernels for generation",
                       kRemove, "enabled")
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
      F("pipeline", T::kObject, "pipeline parallelism (docs/pipeline.md)")
          .nullable()
          .object(make_object(
              {
                  F("stages", T::kJson,
                    "pipeline stages: an int, or \"auto\" (1, or "
                    "pipeline_parallel_size)")
                      .def("auto")
                      .read<PipelineConfig>(
                          [](const json::Value& v, const std::string&, PipelineConfig& c) {
                            c.stages = v.is_int() ? v.as_int() : 0;
                          }),
                  F("partition", T::kString,
                    "layer partition: parameters (\"best\"), uniform or type:REGEX")
                      .def("best")
                      .to(&PipelineConfig::partition),
                  F("seed_layers", T::kBool, "seed each layer").def(false).not_used(),
                  F("activation_checkpoint_interval", T::kInt,
                    "> 0: the model checkpoints its activations (gpt, llama: every block)")
                      .def(0)
                      .to(&PipelineConfig::activation_checkpoint_interval),
                  F("pipe_partitioned", T::kBool,
                    "partition activations over the tensor-parallel group (no-op without it)")
                      .def(true)
                      .to(&PipelineConfig::pipe_partitioned),
                  F("grad_partitioned", T::kBool,
                    "partition gradients over the tensor-parallel group (no-op without it)")
                      .def(true)
                      .to(&PipelineConfig::grad_partitioned),
                  F("schedule", T::kString,
                    "dscore: \"1f1b\" (DeepSpeed's TrainSchedule) or \"interleaved\" "
                    "(Megatron-LM's, virtual_stages chunks a stage)")
                      .def("1f1b")
                      .enums({"1f1b", "interleaved"}, true)
                      .read<PipelineConfig>(
                          [](const json::Value& v, const std::string&, PipelineConfig& c) {
                            c.schedule = v.as_string();
                            for (char& ch : c.schedule)
                              ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                          }),
                  F("virtual_stages", T::kInt,
                    "dscore: chunks of layers per stage under the interleaved schedule")
                      .def(1)
                      .min(1)
                      .to(&PipelineConfig::virtual_stages),
              },
              "pipeline"))
          .to(&TrainingConfig::pipeline),
      gone("progressive_layer_drop", "progressive layer dropping", "Progressive Layer Dropping",
           "remove the block"),
      gone("elasticity", "elastic training", "Elastic training",
           "remove the block and set train_batch_size / train_micro_batch_size_per_gpu / "
           "gradient_accumulation_steps yourself"),
      gone("nebula", "Azure Nebula checkpointing", "Nebula checkpointing",
           "remove the block; checkpoints go to checkpoint_dir"),
      gone("sparse_attention", "sparse attention", "DeepSpeed Sparse Attention",
           "remove the block: a dscore model plugin chooses its own attention"),
      gone("eigenvalue", "eigenvalue computation", "Eigenvalue-based MoQ", "remove the block"),
      gone("compression_training", "compression training", "The DeepSpeed compression library",
           "remove the block (the model trains unquantized)"),
      named("data_efficiency", "data efficiency",
            "\"data_efficiency\" turns on DeepSpeed's data sampling (curriculum learning by a "
            "difficulty metric) and data routing (random layerwise token dropping)",
            kRemove, "enabled"),
      gone("curriculum_learning", "legacy curriculum learning",
           "Legacy top-level curriculum learning",
           "remove the block (DeepSpeed's replacement, data_efficiency.data_sampling."
           "curriculum_learning, is among the features dscore lacks)"),
      gone("quantize_training", "MoQ quantization", "Mixture-of-Quantization (MoQ)",
           "remove the block"),
      F("tensor_parallel", T::kObject,
        "tensor parallelism: DeepSpeed's AutoTP training (docs/parallelism.md)")
          .nullable()
          .object(make_object(
              {
                  F("autotp_size", T::kInt,
                    "ranks each layer is split over (Megatron's split; 0 or 1: none); a "
                    "divisor of the world size")
                      .def(0)
                      .min(0)
                      .to(&TensorParallelConfig::autotp_size),
                  F("tp_overlap_comm", T::kBool,
                    "overlap the allreduce with compute (dscore's are blocking)")
                      .def(false)
                      .not_used(),
                  F("dtype", T::kJson,
                    "the dtype DeepSpeed casts the model to (dscore: the bf16 and fp16 sections)")
                      .def("float16")
                      .not_used(),
                  F("preset_model", T::kString,
                    "a built-in layer pattern (dscore: the model plugin declares its split)")
                      .nullable()
                      .not_used(),
                  F("partition_config", T::kObject, "custom layer partitioning rules")
                      .nullable()
                      .unsupported("\"partition_config\" gives AutoTP custom partitioning rules "
                                   "(TPLayerSpec patterns)",
                                   "Remove the key: the gpt model declares its own split "
                                   "(Megatron's: q/k/v and c_fc by rows, the projections by "
                                   "columns, the vocabulary by rows)"),
                  F("injection_policy_tuple", T::kJson, "inference injection policy")
                      .nullable()
                      .unsupported("\"injection_policy_tuple\" names the layers AutoTP's "
                                   "inference parser splits",
                                   "Remove the key"),
                  F("keep_module_on_host", T::kBool, "inference: keep checkpoints on the host")
                      .def(false)
                      .not_used(),
                  F("replace_with_kernel_inject", T::kBool, "inference kernel injection")
                      .alias("kernel_inject")
                      .def(false)
                      .unsupported("\"replace_with_kernel_inject\" injects DeepSpeed's inference "
                                   "kernels",
                                   "Remove the key (training computes with the model plugin's own "
                                   "kernels)"),
                  F("tensor_parallel", T::kJson, "inference tensor parallelism (tp_size, ...)")
                      .alias("tp")
                      .nullable()
                      .not_used(),
              },
              "tensor parallelism", {.pydantic = true}))
          .to(&TrainingConfig::tensor_parallel),
      expert_parallel_section(),
      named("weight_quantization", "weight quantization",
            "\"weight_quantization\" quantizes weights for ZeRO-Inference", "Remove the section",
            ""),
      named("torch_autocast", "torch autocast",
            "\"torch_autocast\" runs the forward pass under torch.autocast in a lower "
            "precision",
            "Use \"bf16\" or \"fp16\" mixed precision instead, or set \"enabled\": false",
            "enabled"),
      named("compile", "torch.compile / DeepCompile",
            "\"compile\" configures DeepSpeed's DeepCompile compiler passes for torch.compile",
            "Remove the section (or set \"deepcompile\": false)", "deepcompile"),
      F("datastates_ckpt", T::kJson, "DataStates-LLM asynchronous checkpointing")
          .def(false)
          .not_used()
          .unsupported("\"datastates_ckpt\" hands DeepSpeed's checkpoints to the DataStates-LLM "
                       "asynchronous checkpoint engine",
                       "Remove the key; dscore writes its own checkpoints (checkpoint_dir)"),
  };
}

}  // namespace

void add_other_sections(std::vector<FieldSpec>* fields) {
  for (auto group : {engine_sections(), monitor_sections(), unused_sections()})
    for (FieldSpec& f : group) fields->push_back(std::move(f));
  fields->push_back(autotuning_section());
}

}  // namespace dscore::config
