// The top level of the ds_config.json schema: the batch keys, optimizer and
// scheduler, precision sections, the plain top-level switches of
// docs/deepspeed-reference.md#top-level-keys, and dscore's own sections. ZeRO lives in
// deepspeed_schema_zero.cc, the remaining sections in
// deepspeed_schema_sections.cc.
#include "core/config/deepspeed_schema.h"

#include "core/config/schema_builder.h"
#include "core/config/schema_util.h"

namespace dscore::config {

using T = FieldType;

std::shared_ptr<const ObjectSpec> make_object(std::vector<FieldSpec> fields, std::string doc,
                                              ObjectOptions options) {
  auto spec = std::make_shared<ObjectSpec>();
  if (options.pydantic) {
    for (FieldSpec& f : fields) {
      if (!f.auto_rule.empty() || !f.auto_note.empty() || f.type == T::kJson) continue;
      f.auto_note = "DeepSpeed would silently drop it and use the default " +
                    (f.default_value ? value_text(*f.default_value) : std::string("(unset)")) +
                    "; give " + expected_phrase(f);
    }
  }
  spec->fields = std::move(fields);
  spec->allow_unknown = options.allow_unknown;
  spec->quiet_unknown = options.quiet_unknown;
  spec->doc = std::move(doc);
  return spec;
}

namespace {

// "type" + "params" sections naming a plugin. params is the plugin's to
// validate (its own params_schema), so any key is kept as written here.
std::shared_ptr<const ObjectSpec> plugin_section(const std::string& what,
                                                 const std::string& example) {
  auto params = make_object({}, "the plugin's parameters, validated by its params_schema",
                            {.allow_unknown = true, .quiet_unknown = true});
  std::vector<FieldSpec> fields = {
      F("type", T::kString, what + " plugin name, matched case-insensitively (" + example + ")")
          .required(),
      F("params", T::kObject,
        "keyword arguments of the " + what + "; validated by the plugin's schema")
          .nullable()
          .object(params),
  };
  return make_object(std::move(fields), what);
}

std::shared_ptr<const ObjectSpec> optimizer_spec() {
  auto params = make_object({}, "the optimizer's parameters, validated by its params_schema",
                            {.allow_unknown = true, .quiet_unknown = true});
  return make_object(
      {
          F("type", T::kString,
            "optimizer plugin name, matched case-insensitively (\"Adam\", \"AdamW\", \"Lamb\")")
              .required(),
          F("params", T::kObject,
            "keyword arguments of the optimizer (lr, betas, eps, weight_decay, ...)")
              .nullable()
              .object(params),
          F("legacy_fusion", T::kBool, "DeepSpeed's legacy fused fp16 optimizer switch")
              .def(false)
              .not_used(),
      },
      "the optimizer");
}

std::shared_ptr<const ObjectSpec> fp16_spec() {
  return make_object(
      {
          F("enabled", T::kBool, "train in fp16 with a loss scaler")
              .def(false)
              .auto_rule("reduced_precision_off")
              .to(&Fp16Config::enabled),
          F("auto_cast", T::kBool, "cast the model's inputs to fp16")
              .def(false)
              .to(&Fp16Config::auto_cast),
          F("loss_scale", T::kNumber, "0 = dynamic loss scaling; otherwise the static scale")
              .def(0)
              .min(0)
              .to(&Fp16Config::loss_scale),
          F("initial_scale_power", T::kInt, "dynamic scaling starts at 2^initial_scale_power")
              .def(16)
              .range(0, 127)
              .to(&Fp16Config::initial_scale_power),
          F("loss_scale_window", T::kInt, "clean steps before the scale doubles")
              .def(1000)
              .min(1)
              .to(&Fp16Config::loss_scale_window),
          F("hysteresis", T::kInt, "overflows tolerated before the scale halves (ZeRO scaler)")
              .def(2)
              .min(1)
              .to(&Fp16Config::hysteresis),
          F("consecutive_hysteresis", T::kBool, "refill hysteresis after each clean step")
              .def(false)
              .to(&Fp16Config::consecutive_hysteresis),
          // DeepSpeed 0.19 takes an integer and refuses <= 0 for a dynamic scale.
          F("min_loss_scale", T::kInt, "lower bound of the dynamic scale")
              .def(1)
              .min(1)
              .to(&Fp16Config::min_loss_scale),
          F("fp16_master_weights_and_grads", T::kBool,
            "ZeRO 1-3 with optimizer offload: no fp32 master; the optimizer updates the fp16 "
            "parameters")
              .def(false)
              .to(&Fp16Config::fp16_master_weights_and_grads),
      },
      "fp16 mixed precision (docs/deepspeed-reference.md#precision-sections); only read when "
      "enabled");
}

std::shared_ptr<const ObjectSpec> bf16_spec() {
  return make_object(
      {
          F("enabled", T::kBool, "train in bf16 (no loss scaling)")
              .def(false)
              .auto_rule("reduced_precision_off")
              .to(&Bf16Config::enabled),
          F("immediate_grad_update", T::kBool, "apply bf16 gradients immediately")
              .def(false)
              .to(&Bf16Config::immediate_grad_update),
          F("check_grad_overflow", T::kBool,
            "check bf16 gradients for inf/nan (DeepSpeed's default: true)")
              .def(true)
              .not_used(),
          F("bf16_master_weights_and_grads", T::kBool,
            "ZeRO 1-3: no fp32 master; the optimizer updates the bf16 parameters (gradients are "
            "bf16 at these stages)")
              .def(false)
              .to(&Bf16Config::bf16_master_weights_and_grads),
          F("bf16_optimizer_states", T::kBool,
            "with bf16_master_weights_and_grads: keep the optimizer's state in bf16 too")
              .def(false)
              .to(&Bf16Config::bf16_optimizer_states),
      },
      "bf16 mixed precision (docs/deepspeed-reference.md#precision-sections)");
}

std::vector<FieldSpec> batch_and_training_fields() {
  return {
      F("train_batch_size", T::kInt, "global batch: micro-batch * accumulation steps * world size")
          .nullable()
          .auto_rule("batch")
          .to<TrainingConfig>([](TrainingConfig & c) -> auto& { return c.batch.train_batch_size; }),
      F("train_micro_batch_size_per_gpu", T::kInt, "samples per rank per forward/backward")
          .nullable()
          .auto_rule("batch")
          .to<TrainingConfig>(
              [](TrainingConfig & c) -> auto& { return c.batch.train_micro_batch_size_per_gpu; }),
      F("gradient_accumulation_steps", T::kInt, "micro-batches per optimizer step")
          .nullable()
          .auto_rule("batch")
          .to<TrainingConfig>(
              [](TrainingConfig & c) -> auto& { return c.batch.gradient_accumulation_steps; }),
      F("steps_per_print", T::kInt, "print a progress line every N steps (unset: never)")
          .nullable()
          .min(1)
          .to(&TrainingConfig::steps_per_print),
      F("optimizer", T::kObject, "the optimizer plugin and its params")
          .nullable()
          .object(optimizer_spec())
          .read<TrainingConfig>([](const json::Value& v, const std::string& path,
                                   TrainingConfig& c) { c.optimizer = plugin_ref(v, path); }),
      F("scheduler", T::kObject, "the LR scheduler plugin and its params")
          .nullable()
          .object(plugin_section("LR scheduler", "\"WarmupLR\", \"WarmupDecayLR\", \"OneCycle\""))
          .read<TrainingConfig>([](const json::Value& v, const std::string& path,
                                   TrainingConfig& c) { c.scheduler = plugin_ref(v, path); }),
      F("zero_allow_untested_optimizer", T::kBool,
        "allow ZeRO with an optimizer outside the tested list")
          .def(false)
          .to(&TrainingConfig::zero_allow_untested_optimizer),
      F("zero_force_ds_cpu_optimizer", T::kBool,
        "require DeepSpeed's CPU optimizer with ZeRO-Offload")
          .def(true)
          .to(&TrainingConfig::zero_force_ds_cpu_optimizer),
      F("fp16", T::kObject, "fp16 mixed precision")
          .def(json::Value::object())
          .object(fp16_spec())
          .to(&TrainingConfig::fp16),
      F("bf16", T::kObject, "bf16 mixed precision")
          .def(json::Value::object())
          .alias("bfloat16")
          .object(bf16_spec())
          .to(&TrainingConfig::bf16),
      F("amp", T::kObject, "NVIDIA apex AMP (removed from DeepSpeed: an error)")
          .nullable()
          .removed("NVIDIA Apex AMP", "remove the block and use \"fp16\" or \"bf16\"")
          .object(make_object({}, "apex amp", {.allow_unknown = true, .quiet_unknown = true})),
      F("data_types", T::kObject, "gradient accumulation dtype")
          .nullable()
          .object(make_object(
              {F("grad_accum_dtype", T::kString,
                 "dtype gradients accumulate in (default: see "
                 "docs/deepspeed-reference.md#derived-settings)")
                   .nullable()
                   .enums({"fp32", "fp16", "bf16"})
                   .to(&TrainingConfig::grad_accum_dtype),
               F("param_dtype", T::kString, "dtype of the model's parameters under ZeRO-3")
                   .nullable()
                   .unsupported("\"data_types.param_dtype\" makes DeepSpeed hold the "
                                "model's parameters in this dtype, apart from fp16/bf16",
                                "Remove it; the precision sections set the training dtype"),
               F("buffer_dtype", T::kString, "dtype of the model's buffers")
                   .nullable()
                   .unsupported("\"data_types.buffer_dtype\" makes DeepSpeed cast the model's "
                                "buffers to this dtype",
                                "Remove it; the precision sections set the training dtype")},
              "data types"))
          .flattened_into<TrainingConfig>(),
      F("gradient_clipping", T::kNumber,
        "clip the global gradient norm to this value (0 = off; DeepSpeed's default is 1.0 since "
        "0.19.3)")
          .def(1.0)
          .min(0)
          .auto_rule("hf_max_grad_norm")
          .to(&TrainingConfig::gradient_clipping),
      F("communication_data_type", T::kString,
        "dtype of gradient communication (default: the training dtype)")
          .nullable()
          .enums({"fp16", "bf16", "fp32"}, true)
          .enum_message("Invalid communication_data_type. Supported data types: ['fp16', 'bf16', "
                        "'fp32']. Got: {}")
          .to(&TrainingConfig::communication_data_type),
      F("seq_parallel_communication_data_type", T::kString, "sequence-parallel communication dtype")
          .nullable()
          .not_used(),
      F("seq_parallel_comm_data_type", T::kString,
        "old name of seq_parallel_communication_data_type")
          .nullable()
          .not_used()
          .deprecated("renamed to \"seq_parallel_communication_data_type\" after DeepSpeed 0.16.0; "
                      "DeepSpeed no longer reads this name"),
      F("managed_gradient_accumulation", T::kBool,
        "the engine counts micro-batches to find accumulation boundaries")
          .def(true)
          .unsupported("\"managed_gradient_accumulation\": false makes DeepSpeed leave "
                       "gradient-accumulation boundaries to the caller's own loop",
                       "Remove it: dscore's engine always counts micro-batches "
                       "(gradient_accumulation_steps)"),
      F("gradient_allreduce_op", T::kString, "how gradients combine across ranks: mean or sum")
          .def("mean")
          .enums({"mean", "sum"}, true)
          .unsupported("\"gradient_allreduce_op\": \"sum\" makes DeepSpeed sum gradients "
                       "across data-parallel ranks instead of averaging them",
                       "Remove it (dscore averages), and scale the learning rate by the world "
                       "size if you relied on summed gradients"),
      F("log_level", T::kString, "DeepSpeed's logger level").nullable().not_used(),
      F("prescale_gradients", T::kBool, "divide gradients by the world size before the all-reduce")
          .def(false)
          .to(&TrainingConfig::prescale_gradients),
      F("gradient_predivide_factor", T::kNumber, "divide gradients by this before the all-reduce")
          .def(1.0)
          .to(&TrainingConfig::gradient_predivide_factor),
      F("sparse_gradients", T::kBool, "sparse embedding gradients")
          .nullable()
          .removed("Sparse reduction of embedding gradients",
                   "remove the key (dscore reduces dense gradients)"),
      F("disable_allgather", T::kBool, "DeepSpeed internal switch").def(false).not_used(),
      F("dump_state", T::kBool, "print the engine state after initialization")
          .def(false)
          .not_used(),
      F("vocabulary_size", T::kInt, "only a warning in DeepSpeed if not a multiple of 8")
          .nullable()
          .not_used(),
      F("wall_clock_breakdown", T::kBool, "time forward/backward/step and report them")
          .def(false)
          .to(&TrainingConfig::wall_clock_breakdown),
      F("memory_breakdown", T::kBool, "report memory usage")
          .def(false)
          .to(&TrainingConfig::memory_breakdown),
      F("graph_harvesting", T::kBool, "CUDA graph harvesting")
          .nullable()
          .removed("Graph harvesting", "remove the key"),
      F("dataloader_drop_last", T::kBool, "drop the last incomplete batch")
          .def(false)
          .to(&TrainingConfig::dataloader_drop_last),
      F("use_data_before_expert_parallelism", T::kBool,
        "MoE rank order: expert groups strided, data groups consecutive")
          .def(false)
          .unsupported("\"use_data_before_expert_parallelism\" orders the ranks data-first "
                       "(each expert group strided across the data-parallel groups)",
                       "Remove the key: dscore's expert groups are consecutive ranks "
                       "(DeepSpeed's default)"),
      F("sequence_parallel_size", T::kInt,
        "Ulysses sequence parallelism: the ranks that split each sample's sequence (1: none; "
        "docs/parallelism.md)")
          .nullable()
          .def(1)
          .min(1)
          .to(&TrainingConfig::sequence_parallel_size),
      F("data_parallel_size", T::kInt, "data-parallel size (device mesh)").nullable().not_used(),
      F("pipeline_parallel_size", T::kInt, "pipeline stages (as pipeline.stages; docs/pipeline.md)")
          .nullable()
          .to(&TrainingConfig::pipeline_parallel_size),
  };
}

// {"type": ..., "params": {...}}: a plugin named beside its parameters
// (plugins.monitors' entries, plugins.swapper).
std::shared_ptr<const ObjectSpec> monitor_like(const std::string& type_doc,
                                               const std::string& what) {
  return make_object(
      {
          F("type", T::kString, type_doc).required(),
          F("params", T::kObject, "the " + what + "'s parameters, validated by its params_schema")
              .nullable()
              .object(make_object({}, what + " params",
                                  {.allow_unknown = true, .quiet_unknown = true})),
      },
      "a " + what + " plugin");
}

std::vector<FieldSpec> dscore_fields() {
  auto monitor = monitor_like("monitor plugin name", "monitor");
  return {
      F("model", T::kObject,
        "dscore: the model plugin (\"type\") and its parameters (every other key)")
          .nullable()
          .object(make_object(
              {F("type", T::kString, "model plugin name (\"mlp\", \"gpt\")").required()},
              "the model: \"type\" plus the model plugin's own parameters",
              {.allow_unknown = true, .quiet_unknown = true}))
          .read<TrainingConfig>([](const json::Value& v, const std::string& path,
                                   TrainingConfig& c) { c.model = model_ref(v, path); }),
      F("data", T::kObject, "dscore: where training batches come from")
          .def(json::Value::object())
          .object(make_object(
              {
                  F("type", T::kString,
                    "synthetic: the model's own task; text: every byte of the file(s) is a token "
                    "0..255 "
                    "(set model.vocab_size to 256); tokens: llm.c token shards (a 256 x int32 "
                    "little-endian header with magic 20240520, version 1 and the token count, then "
                    "uint16 tokens; or magic 20240801, version 7, uint32 tokens), as `dscore "
                    "tokenize` writes")
                      .def("synthetic")
                      .enums({"synthetic", "text", "tokens"})
                      .to(&DataConfig::type),
                  F("path", T::kString,
                    "text / tokens: a file, or a glob pattern whose matches, sorted, form one "
                    "dataset "
                    "(\"data/fineweb_train_*.bin\"); files are read a sample at a time, never "
                    "whole "
                    "into RAM, and must not change while a run reads them")
                      .nullable()
                      .to(&DataConfig::path),
                  F("shuffle", T::kBool,
                    "text / tokens: visit the samples of each epoch in a permutation drawn from "
                    "seed and "
                    "epoch (false: in file order)")
                      .def(true)
                      .to(&DataConfig::shuffle),
              },
              "training data. text and tokens need a token model (one int32 input \"tokens\" of "
              "block_size + 1 tokens, e.g. \"gpt\"): a file of n tokens gives floor((n - 1) / "
              "block_size) "
              "samples, sample k starting at token k * block_size (neighbours share one token, as "
              "in "
              "llm.c), and the files' samples, N in all, form one epoch. Global sample i is entry "
              "i mod N "
              "of epoch i / N's order (file order, or with shuffle a permutation drawn from seed "
              "and the "
              "epoch), so a resumed run and any world size read the same batches. At start-up "
              "every file "
              "is checked: a missing file or a pattern matching nothing, an empty file, a shard "
              "with the "
              "wrong magic or version or a size that does not match its header, a token >= "
              "model.vocab_size (when given), and data holding fewer than train_batch_size samples "
              "are "
              "errors naming the file and the fix"))
          .to(&TrainingConfig::data),
      F("plugins", T::kObject, "dscore: where to find plugins, and extra monitors")
          .nullable()
          .object(make_object(
              {
                  F("paths", T::kStringArray, "folders or .so files searched for plugins")
                      .def(json::Value::array())
                      .to(&TrainingConfig::plugin_paths),
                  F("monitors", T::kObjectArray,
                    "extra monitor plugins: [{\"type\": ..., \"params\": {...}}]")
                      .def(json::Value::array())
                      .object(monitor)
                      // After the DeepSpeed monitor sections, which come
                      // earlier in the schema: the order monitors are written.
                      .read<TrainingConfig>(
                          [](const json::Value& v, const std::string& path, TrainingConfig& c) {
                            add_monitor_plugins(v, path, &c.monitors);
                          }),
                  F("swapper", T::kObject,
                    "the offload plugin NVMe offload does its I/O with: {\"type\": ..., "
                    "\"params\": {...}}; its params join the \"aio\" settings")
                      .nullable()
                      .object(monitor_like("offload plugin name (default \"nvme\")", "swapper"))
                      .read<TrainingConfig>(
                          [](const json::Value& v, const std::string& path, TrainingConfig& c) {
                            c.swapper = plugin_ref(v, path);
                          }),
              },
              "plugin search path, extra monitors and the swapper"))
          .flattened_into<TrainingConfig>(),
      F("comm", T::kObject, "dscore: the communication backend")
          .def(json::Value::object())
          .object(make_object(
              {
                  F("backend", T::kString,
                    "comm plugin name, checked against the plugins found (`dscore plugins list`); "
                    "\"auto\": mpi with several ranks, else local")
                      .def("auto")
                      .to(&CommConfig::backend),
                  F("timeout_ms", T::kInt, "deadline of every collective, in milliseconds")
                      .def_int(300000)
                      .min(1)
                      .to(&CommConfig::timeout_ms),
              },
              "communication"))
          .to(&TrainingConfig::comm),
      F("device", T::kString,
        "dscore: what the engine computes on: \"auto\" (a CUDA GPU when one is visible, else "
        "the CPU), \"cpu\" or \"cuda\"")
          .def("auto")
          .enums({"auto", "cpu", "cuda"})
          .to(&TrainingConfig::device),
      F("train_steps", T::kInt, "dscore: optimizer steps `dscore run` performs (--steps overrides)")
          .nullable()
          .min(0)
          .to(&TrainingConfig::train_steps),
      F("checkpoint_dir", T::kString, "dscore: where `dscore run` saves checkpoints")
          .nullable()
          .to(&TrainingConfig::checkpoint_dir),
      F("save_interval", T::kInt,
        "dscore: `dscore run` saves a checkpoint to checkpoint_dir every N optimizer steps and "
        "after "
        "the last one (0 = never)")
          .def_int(0)
          .min(0)
          .to(&TrainingConfig::save_interval),
      F("seed", T::kInt,
        "dscore: seeds parameter initialisation, synthetic data and the data.shuffle order")
          .def(42)
          .min(0)
          .to(&TrainingConfig::seed),
  };
}

std::shared_ptr<const ObjectSpec> build_schema() {
  std::vector<FieldSpec> fields = batch_and_training_fields();
  fields.push_back(F("zero_optimization", T::kObject,
                     "ZeRO (docs/deepspeed-reference.md#zero-optimization-keys); the legacy "
                     "boolean form means stage 1 / 0")
                       .def(json::Value::object())
                       .object(zero_optimization_spec())
                       .to(&TrainingConfig::zero));
  fields.push_back(
      F("allgather_size", T::kInt, "only read with the legacy boolean \"zero_optimization\"")
          .nullable()
          .min(0)
          .deprecated("deprecated: only read with the legacy boolean \"zero_optimization\"; use "
                      "zero_optimization.allgather_bucket_size"));
  fields.push_back(
      F("aio", T::kObject, "asynchronous I/O for NVMe offload (docs/deepspeed-reference.md#aio)")
          .def(json::Value::object())
          .object(aio_spec())
          .to(&TrainingConfig::aio));
  add_other_sections(&fields);
  for (FieldSpec& f : dscore_fields()) fields.push_back(std::move(f));
  return make_object(std::move(fields), "ds_config.json");
}

}  // namespace

const ObjectSpec& deepspeed_schema() {
  static const std::shared_ptr<const ObjectSpec> kSchema = build_schema();
  return *kSchema;
}

}  // namespace dscore::config
