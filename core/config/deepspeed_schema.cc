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
                    (f.default_value ? value_text(*f.default_value) : std::string("(unset)")) + "; give " +
                    expected_phrase(f);
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
std::shared_ptr<const ObjectSpec> plugin_section(const std::string& what, const std::string& example) {
  auto params = make_object({}, "the plugin's parameters, validated by its params_schema",
                            {.allow_unknown = true, .quiet_unknown = true});
  std::vector<FieldSpec> fields = {
      F("type", T::kString, what + " plugin name, matched case-insensitively (" + example + ")").required(),
      F("params", T::kObject, "keyword arguments of the " + what + "; validated by the plugin's schema")
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
          F("params", T::kObject, "keyword arguments of the optimizer (lr, betas, eps, weight_decay, ...)")
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
              .auto_rule("reduced_precision_off"),
          F("auto_cast", T::kBool, "cast the model's inputs to fp16").def(false),
          F("loss_scale", T::kNumber, "0 = dynamic loss scaling; otherwise the static scale").def(0).min(0),
          F("initial_scale_power", T::kInt, "dynamic scaling starts at 2^initial_scale_power")
              .def(16)
              .range(0, 127),
          F("loss_scale_window", T::kInt, "clean steps before the scale doubles").def(1000).min(1),
          F("hysteresis", T::kInt, "overflows tolerated before the scale halves (ZeRO scaler)").def(2).min(1),
          F("consecutive_hysteresis", T::kBool, "refill hysteresis after each clean step").def(false),
          F("min_loss_scale", T::kNumber, "lower bound of the dynamic scale").def(1).min(0),
          F("fp16_master_weights_and_grads", T::kBool,
            "keep fp16 master weights (ZeRO stage 2 with CPU offload only)")
              .def(false),
      },
      "fp16 mixed precision (docs/deepspeed-reference.md#precision-sections); only read when enabled");
}

std::shared_ptr<const ObjectSpec> bf16_spec() {
  return make_object(
      {
          F("enabled", T::kBool, "train in bf16 (no loss scaling)")
              .def(false)
              .auto_rule("reduced_precision_off"),
          F("immediate_grad_update", T::kBool, "apply bf16 gradients immediately").def(false),
      },
      "bf16 mixed precision (docs/deepspeed-reference.md#precision-sections)");
}

std::vector<FieldSpec> batch_and_training_fields() {
  return {
      F("train_batch_size", T::kInt, "global batch: micro-batch * accumulation steps * world size")
          .nullable()
          .auto_rule("batch"),
      F("train_micro_batch_size_per_gpu", T::kInt, "samples per rank per forward/backward")
          .nullable()
          .auto_rule("batch"),
      F("gradient_accumulation_steps", T::kInt, "micro-batches per optimizer step")
          .nullable()
          .auto_rule("batch"),
      F("steps_per_print", T::kInt, "print a progress line every N steps (unset: never)").nullable().min(1),
      F("optimizer", T::kObject, "the optimizer plugin and its params").nullable().object(optimizer_spec()),
      F("scheduler", T::kObject, "the LR scheduler plugin and its params")
          .nullable()
          .object(plugin_section("LR scheduler", "\"WarmupLR\", \"WarmupDecayLR\", \"OneCycle\"")),
      F("zero_allow_untested_optimizer", T::kBool, "allow ZeRO with an optimizer outside the tested list")
          .def(false),
      F("zero_force_ds_cpu_optimizer", T::kBool, "require DeepSpeed's CPU optimizer with ZeRO-Offload")
          .def(true),
      F("fp16", T::kObject, "fp16 mixed precision").def(json::Value::object()).object(fp16_spec()),
      F("bf16", T::kObject, "bf16 mixed precision")
          .def(json::Value::object())
          .alias("bfloat16")
          .object(bf16_spec()),
      F("amp", T::kObject, "NVIDIA apex AMP: not implemented by dscore (use fp16 or bf16)")
          .nullable()
          .not_used()
          .object(make_object({F("enabled", T::kBool, "enable apex AMP (an error in dscore)").def(false)},
                              "apex amp: enabled plus apex's own arguments",
                              {.allow_unknown = true, .quiet_unknown = true})),
      F("data_types", T::kObject, "gradient accumulation dtype")
          .nullable()
          .object(make_object({F("grad_accum_dtype", T::kString,
                                 "dtype gradients accumulate in (default: see docs/deepspeed-reference.md#derived-settings)")
                                   .nullable()
                                   .enums({"fp32", "fp16", "bf16"})},
                              "data types")),
      F("gradient_clipping", T::kNumber, "clip the global gradient norm to this value (0 = off)")
          .def(0.0)
          .min(0)
          .auto_rule("hf_max_grad_norm"),
      F("communication_data_type", T::kString,
        "dtype of gradient communication (default: the training dtype)")
          .nullable()
          .enums({"fp16", "bf16", "fp32"}, true)
          .enum_message(
              "Invalid communication_data_type. Supported data types: ['fp16', 'bf16', 'fp32']. Got: {}"),
      F("seq_parallel_comm_data_type", T::kString, "sequence-parallel communication dtype")
          .def("fp32")
          .not_used(),
      F("prescale_gradients", T::kBool, "divide gradients by the world size before the all-reduce")
          .def(false),
      F("gradient_predivide_factor", T::kNumber, "divide gradients by this before the all-reduce").def(1.0),
      F("sparse_gradients", T::kBool, "sparse embedding gradients").def(false).not_used(),
      F("disable_allgather", T::kBool, "DeepSpeed internal switch").def(false).not_used(),
      F("dump_state", T::kBool, "print the engine state after initialization").def(false).not_used(),
      F("vocabulary_size", T::kInt, "only a warning in DeepSpeed if not a multiple of 8")
          .nullable()
          .not_used(),
      F("wall_clock_breakdown", T::kBool, "time forward/backward/step and report them").def(false),
      F("memory_breakdown", T::kBool, "report memory usage").def(false),
      F("graph_harvesting", T::kBool, "CUDA graph harvesting").def(false).not_used(),
      F("dataloader_drop_last", T::kBool, "drop the last incomplete batch").def(false),
      F("use_data_before_expert_parallelism", T::kBool, "MoE data ordering").def(false).not_used(),
      F("sequence_parallel_size", T::kInt, "sequence-parallel size (device mesh)").nullable().not_used(),
      F("data_parallel_size", T::kInt, "data-parallel size (device mesh)").nullable().not_used(),
  };
}

std::vector<FieldSpec> dscore_fields() {
  auto monitor = make_object(
      {
          F("type", T::kString, "monitor plugin name").required(),
          F("params", T::kObject, "the monitor's parameters, validated by its params_schema")
              .nullable()
              .object(make_object({}, "monitor params", {.allow_unknown = true, .quiet_unknown = true})),
      },
      "a monitor plugin");
  return {
      F("model", T::kObject, "dscore: the model plugin (\"type\") and its parameters (every other key)")
          .nullable()
          .object(make_object({F("type", T::kString, "model plugin name (\"mlp\", \"gpt\")").required()},
                              "the model: \"type\" plus the model plugin's own parameters",
                              {.allow_unknown = true, .quiet_unknown = true})),
      F("data", T::kObject, "dscore: where training batches come from")
          .def(json::Value::object())
          .object(make_object(
              {
                  F("type", T::kString,
                    "synthetic: the model's own task; text: every byte of the file(s) is a token 0..255 "
                    "(set model.vocab_size to 256); tokens: llm.c token shards (a 256 x int32 "
                    "little-endian header with magic 20240520, version 1 and the token count, then uint16 "
                    "tokens)")
                      .def("synthetic")
                      .enums({"synthetic", "text", "tokens"}),
                  F("path", T::kString,
                    "text / tokens: a file, or a glob pattern whose matches, sorted, form one dataset "
                    "(\"data/fineweb_train_*.bin\"); files are memory-mapped, never read into RAM")
                      .nullable(),
                  F("shuffle", T::kBool,
                    "text / tokens: visit the samples of each epoch in a permutation drawn from seed and "
                    "epoch (false: in file order)")
                      .def(true),
              },
              "training data. text and tokens need a token model (one int32 input \"tokens\" of "
              "block_size + 1 tokens, e.g. \"gpt\"): a file of n tokens gives floor((n - 1) / block_size) "
              "samples, sample k starting at token k * block_size (neighbours share one token, as in "
              "llm.c), and the files' samples, N in all, form one epoch. Global sample i is entry i mod N "
              "of epoch i / N's order (file order, or with shuffle a permutation drawn from seed and the "
              "epoch), so a resumed run and any world size read the same batches. At start-up every file "
              "is checked: a missing file or a pattern matching nothing, an empty file, a shard with the "
              "wrong magic or version or a size that does not match its header, a token >= "
              "model.vocab_size (when given), and data holding fewer than train_batch_size samples are "
              "errors naming the file and the fix")),
      F("plugins", T::kObject, "dscore: where to find plugins, and extra monitors")
          .nullable()
          .object(make_object(
              {
                  F("paths", T::kStringArray, "folders or .so files searched for plugins")
                      .def(json::Value::array()),
                  F("monitors", T::kObjectArray,
                    "extra monitor plugins: [{\"type\": ..., \"params\": {...}}]")
                      .def(json::Value::array())
                      .object(monitor),
              },
              "plugin search path and extra monitors")),
      F("comm", T::kObject, "dscore: the communication backend")
          .def(json::Value::object())
          .object(make_object(
              {
                  F("backend", T::kString, "comm plugin name; \"auto\": mpi with several ranks, else local")
                      .def("auto"),
                  F("timeout_ms", T::kInt, "deadline of every collective, in milliseconds")
                      .def_int(300000)
                      .min(1),
              },
              "communication")),
      F("train_steps", T::kInt, "dscore: optimizer steps `dscore run` performs (--steps overrides)")
          .nullable()
          .min(0),
      F("checkpoint_dir", T::kString, "dscore: where `dscore run` saves checkpoints").nullable(),
      F("save_interval", T::kInt,
        "dscore: `dscore run` saves a checkpoint to checkpoint_dir every N optimizer steps and after "
        "the last one (0 = never)")
          .def_int(0)
          .min(0),
      F("seed", T::kInt, "dscore: seeds parameter initialisation, synthetic data and the data.shuffle order")
          .def(42)
          .min(0),
  };
}

std::shared_ptr<const ObjectSpec> build_schema() {
  std::vector<FieldSpec> fields = batch_and_training_fields();
  fields.push_back(
      F("zero_optimization", T::kObject, "ZeRO (docs/deepspeed-reference.md#zero-optimization-keys); the legacy boolean form means stage 1 / 0")
          .def(json::Value::object())
          .object(zero_optimization_spec()));
  fields.push_back(F("allgather_size", T::kInt, "only read with the legacy boolean \"zero_optimization\"")
                       .nullable()
                       .min(0)
                       .deprecated("deprecated: only read with the legacy boolean \"zero_optimization\"; use "
                                   "zero_optimization.allgather_bucket_size"));
  fields.push_back(F("aio", T::kObject, "asynchronous I/O for NVMe offload (docs/deepspeed-reference.md#aio)")
                       .def(json::Value::object())
                       .object(aio_spec()));
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
