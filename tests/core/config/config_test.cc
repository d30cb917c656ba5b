// Tests for core/config/config.cc (and training_config_builder.cc): the
// whole load, the one-line messages a user sees for each bad input of
// issue 2, collecting every error, and the typed TrainingConfig.
#include "core/config/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/config/config_binding.h"
#include "core/config/deepspeed_schema.h"

namespace dscore::config {
namespace {

// The schema's default of the key at `path` ({"fp16", "loss_scale_window"}).
json::Value schema_default(const std::vector<std::string>& path) {
  const ObjectSpec* spec = &deepspeed_schema();
  const FieldSpec* field = nullptr;
  for (const std::string& key : path) {
    EXPECT_NE(spec, nullptr) << key;
    if (spec == nullptr) return json::Value();
    field = spec->find(key);
    EXPECT_NE(field, nullptr) << key;
    if (field == nullptr) return json::Value();
    spec = field->object.get();
  }
  EXPECT_TRUE(field && field->default_value) << path.back() << " has no default";
  return field && field->default_value ? *field->default_value : json::Value();
}

LoadedConfig load(const std::string& text, ResolveContext ctx = {}) {
  return load_config_text(text, "ds_config.json", ctx);
}

// Every error as format_error prints it, one per line.
std::vector<std::string> messages(const LoadedConfig& c) {
  std::vector<std::string> out;
  for (const ConfigError& e : c.errors) {
    std::string line = format_error(e, c.source_name);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    out.push_back(line);
  }
  return out;
}

using Lines = std::vector<std::string>;

// ------------------------------------------- issue 2: each bad input

TEST(ConfigErrors, MalformedJson) {
  EXPECT_EQ(messages(load("{\n  \"train_batch_size\": 8\n  \"fp16\": {}\n}")),
            Lines{"ds_config.json:3:3: Missing a comma or '}' after an object member."});
}

TEST(ConfigErrors, UnknownKeyTopLevel) {
  EXPECT_EQ(
      messages(load("{\n  \"train_batch_size\": 8,\n  \"zero_optimisation\": {\"stage\": 2}\n}")),
      Lines{
          "ds_config.json:3:3: zero_optimisation: unknown key \"zero_optimisation\"; did you mean "
          "\"zero_optimization\"?"});
}

TEST(ConfigErrors, UnknownKeyNested) {
  EXPECT_EQ(
      messages(load("{\n  \"train_batch_size\": 8,\n  \"zero_optimization\": {\n    \"stage\": 2,\n"
                    "    \"overlap_com\": true\n  }\n}")),
      Lines{"ds_config.json:5:5: zero_optimization.overlap_com: unknown key \"overlap_com\"; did "
            "you mean "
            "\"overlap_comm\"?"});
}

TEST(ConfigErrors, WrongType) {
  EXPECT_EQ(messages(load("{\n  \"train_batch_size\": \"8\"\n}")),
            Lines{"ds_config.json:2:23: train_batch_size: expected an int, got string \"8\""});
}

TEST(ConfigErrors, AutoWhereNotAllowed) {
  EXPECT_EQ(
      messages(
          load("{\n  \"train_batch_size\": 8,\n  \"zero_optimization\": {\"stage\": \"auto\"}\n}")),
      Lines{"ds_config.json:3:34: zero_optimization.stage: \"auto\" is not accepted here; "
            "DeepSpeed would "
            "silently drop it and run ZeRO stage 0; give 0-3"});
}

TEST(ConfigErrors, BatchTriadViolation) {
  ResolveContext w2;
  w2.world_size = 2;
  EXPECT_EQ(messages(load(
                "{\n  \"train_batch_size\": 30,\n  \"train_micro_batch_size_per_gpu\": 4\n}", w2)),
            Lines{"ds_config.json:2:23: train_batch_size: Check batch related parameters. "
                  "train_batch_size is not "
                  "equal to micro_batch_per_gpu * gradient_acc_step * world_size 30 != 4 * 3 * 2"});
  EXPECT_EQ(messages(load("{\"gradient_accumulation_steps\": 2}", w2)),
            Lines{"ds_config.json:1:1: Either train_batch_size or train_micro_batch_size_per_gpu "
                  "needs to be provided"});
  EXPECT_EQ(messages(load("{\"train_batch_size\": 1}", w2)),
            Lines{"ds_config.json:1:22: train_micro_batch_size_per_gpu: Micro batch size per gpu: "
                  "0 has to be greater "
                  "than 0 (train_micro_batch_size_per_gpu derived as train 1 // world size 2)"});
}

TEST(ConfigErrors, DuplicateKey) {
  EXPECT_EQ(messages(load("{\n  \"train_batch_size\": 8,\n  \"zero_optimization\": {\"stage\": 1, "
                          "\"stage\": 2}\n}")),
            Lines{"ds_config.json:3:37: duplicate key \"stage\" (first at 3:25)"});
}

TEST(ConfigErrors, DeprecatedTogetherWithNewKey) {
  EXPECT_EQ(
      messages(load(
          "{\n  \"train_batch_size\": 8,\n  \"zero_optimization\": {\n    \"cpu_offload\": true,\n"
          "    \"offload_optimizer\": {\"device\": \"cpu\"}\n  }\n}")),
      Lines{
          "ds_config.json:4:5: zero_optimization.cpu_offload: Cannot provide deprecated parameter "
          "'cpu_offload' and replacing parameter 'offload_optimizer' together"});
}

// ------------------------------------------------------ whole-load behaviour

TEST(ConfigLoad, CollectsEveryErrorInFileOrder) {
  LoadedConfig c = load(
      "{\n  \"zero_optimization\": {\"stage\": 5},\n  \"train_batch_size\": \"x\",\n  \"fp16\": "
      "{\"enabled\": 1},\n"
      "  \"steps_per_prnt\": 1\n}");
  EXPECT_EQ(messages(c),
            (Lines{
                "ds_config.json:2:34: zero_optimization.stage: must be between 0 and 3, got 5",
                "ds_config.json:3:23: train_batch_size: expected an int, got string \"x\"",
                "ds_config.json:4:23: fp16.enabled: expected a bool (true or false), got integer 1",
                "ds_config.json:5:3: steps_per_prnt: unknown key \"steps_per_prnt\"; did you mean "
                "\"steps_per_print\"?",
            }));
  EXPECT_FALSE(c.config);
}

TEST(ConfigLoad, DocumentMustBeAnObject) {
  EXPECT_EQ(messages(load("[1, 2]")),
            Lines{"ds_config.json:1:1: a ds_config.json holds a JSON object, got array [1,2]"});
}

TEST(ConfigLoad, WorldSizeMustBePositive) {
  ResolveContext ctx;
  ctx.world_size = 0;
  EXPECT_EQ(messages(load("{\"train_batch_size\": 8}", ctx)),
            Lines{"ds_config.json: the world size must be at least 1, got 0"});
}

TEST(ConfigLoad, FileErrors) {
  LoadedConfig missing = load_config_file("/nonexistent/ds.json", {});
  EXPECT_EQ(messages(missing),
            Lines{"/nonexistent/ds.json: cannot read config file: No such file or directory"});
  LoadedConfig dir = load_config_file(std::filesystem::temp_directory_path().string(), {});
  ASSERT_EQ(dir.errors.size(), 1u);
  EXPECT_NE(dir.errors[0].message.find("Is a directory"), std::string::npos);

  auto path = std::filesystem::temp_directory_path() / "dscore_config_test.json";
  std::ofstream(path) << "{\"train_micro_batch_size_per_gpu\": 2}";
  LoadedConfig ok = load_config_file(path.string(), {});
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.source_name, path.string());
  EXPECT_EQ(ok.config->batch.train_batch_size, 2);
  std::filesystem::remove(path);
}

TEST(ConfigLoad, FormatErrorKeepsOneLine) {
  ConfigError e{"a\nb", {3, 4}, "unknown key \"a\nb\x01\""};
  EXPECT_EQ(format_error(e, "f.json"), "f.json:3:4: a\\nb: unknown key \"a\\nb\\x01\"");
  EXPECT_EQ(format_error(ConfigError{"", {}, "m"}, "f.json"), "f.json: m");
}

TEST(ConfigLoad, StepsFromTheCommandLineOverrideTheFile) {
  ResolveContext ctx;
  ctx.train_steps = 20;
  LoadedConfig c = load(R"({"train_batch_size": 4, "train_steps": 10})", ctx);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.config->train_steps, 20);
  EXPECT_EQ(*c.resolved.find("train_steps"), json::Value(20));
  ASSERT_FALSE(c.notices.empty());
  EXPECT_EQ(c.notices.back().message, "--steps 20 overrides 10");
}

TEST(ConfigLoad, ResolvedConfigReloadsToItself) {
  ResolveContext ctx;
  ctx.world_size = 2;
  ctx.hidden_size = 64;
  LoadedConfig first = load(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
      "gradient_accumulation_steps": 2, "bfloat16": {"enabled": true},
      "zero_optimization": {"stage": 3, "cpu_offload": true, "stage3_prefetch_bucket_size": "auto"},
      "aio": {"thread_count": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
      "csv_monitor": {"enabled": true}, "model": {"type": "mlp", "hidden_size": 64}})",
                            ctx);
  ASSERT_TRUE(first.ok()) << messages(first).size();
  LoadedConfig second = load(json::serialize(first.resolved, true), ctx);
  ASSERT_TRUE(second.ok()) << (messages(second).empty() ? "" : messages(second)[0]);
  EXPECT_EQ(json::serialize(second.resolved, true), json::serialize(first.resolved, true));
  EXPECT_EQ(second.resolved, first.resolved);
}

// The ready-made configs under configs/ must be valid. Only the batch
// equality depends on the world size they are meant for, so that one
// assertion is allowed to fail at world size 1.
TEST(ConfigLoad, ShippedConfigsAreValid) {
  const std::filesystem::path dir = std::filesystem::path(DSCORE_SOURCE_DIR) / "configs";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no configs/ folder yet";
  size_t checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    // Loaded at one rank: what a config says of its job's size (the batch
    // triad, a pipeline's stages) may not hold there, and nothing else may fail.
    LoadedConfig c = load_config_file(entry.path().string(), ResolveContext{});
    for (const ConfigError& e : c.errors)
      EXPECT_TRUE(e.message.rfind("Check batch related parameters", 0) == 0 ||
                  e.message.find("does not divide the world size 1") != std::string::npos)
          << format_error(e, c.source_name);
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

// ------------------------------------------------------- TrainingConfig

TEST(TrainingConfigBuild, ReadsEverySection) {
  ResolveContext ctx;
  ctx.world_size = 2;
  LoadedConfig c = load(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 10,
    "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.95], "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
    "fp16": {"enabled": true, "loss_scale_window": 500},
    "gradient_clipping": 1.0, "communication_data_type": "FP32",
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}},
    "activation_checkpointing": {"number_checkpoints": 4},
    "comms_logger": {"verbose": true, "prof_ops": ["all_reduce"]},
    "checkpoint": {"tag_validation": "ignore"},
    "tensorboard": {"enabled": true, "output_path": "tb"}, "wandb": {"enabled": false},
    "csv_monitor": {"enabled": true, "job_name": "run1"},
    "plugins": {"paths": ["/opt/plugins"], "monitors": [{"type": "my_monitor", "params": {"x": 1}}]},
    "model": {"type": "gpt", "n_layer": 2},
    "data": {"type": "tokens", "path": "train.bin"}, "comm": {"backend": "mpi"},
    "train_steps": 100, "checkpoint_dir": "ckpt", "seed": 1234
  })",
                        ctx);
  ASSERT_TRUE(c.ok()) << messages(c)[0];
  const TrainingConfig& t = *c.config;
  EXPECT_EQ(t.batch.train_batch_size, 16);
  EXPECT_EQ(t.batch.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(t.batch.gradient_accumulation_steps, 2);
  EXPECT_EQ(t.steps_per_print, 10);

  ASSERT_TRUE(t.optimizer);
  EXPECT_EQ(t.optimizer->type, "Adam");
  EXPECT_EQ(t.optimizer->params_path, "optimizer.params");
  EXPECT_TRUE(
      t.optimizer->params.find("weight_decay")->is_auto());  // the plugin's schema resolves it
  EXPECT_EQ(t.optimizer->params.find("lr")->location.line, 3);
  EXPECT_EQ(t.optimizer->location.line, 3);
  ASSERT_TRUE(t.scheduler);
  EXPECT_EQ(t.scheduler->type, "WarmupLR");
  EXPECT_EQ(t.scheduler->params_path, "scheduler.params");

  EXPECT_TRUE(t.fp16.enabled);
  EXPECT_EQ(t.fp16.loss_scale_window, 500);
  EXPECT_EQ(t.fp16.initial_scale_power, 16);
  EXPECT_FALSE(t.bf16.enabled);
  EXPECT_EQ(t.gradient_clipping, 1.0);
  EXPECT_EQ(*t.communication_data_type, "fp32");

  EXPECT_EQ(t.zero.stage, 2);
  EXPECT_FALSE(t.zero.overlap_comm);
  ASSERT_TRUE(t.zero.offload_optimizer);
  EXPECT_EQ(t.zero.offload_optimizer->device, OffloadDevice::kNvme);
  EXPECT_EQ(t.zero.offload_optimizer->nvme_path, "/nvme");
  EXPECT_EQ(t.zero.offload_optimizer->buffer_count, 4);
  EXPECT_FALSE(t.zero.offload_param);
  EXPECT_EQ(*t.activation_checkpointing.number_checkpoints, 4);
  EXPECT_EQ(t.aio.block_size, 1048576);

  EXPECT_TRUE(t.comms_logger.present);
  EXPECT_FALSE(t.comms_logger.enabled);
  EXPECT_TRUE(t.comms_logger.verbose);
  EXPECT_EQ(t.comms_logger.prof_ops, std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(t.checkpoint.tag_validation, "IGNORE");

  ASSERT_EQ(t.monitors.size(), 3u);
  EXPECT_EQ(t.monitors[0].type, "tensorboard");
  EXPECT_EQ(json::serialize(t.monitors[0].params),
            R"({"output_path":"tb","job_name":"DeepSpeedJobName"})");
  EXPECT_EQ(t.monitors[0].params_path, "tensorboard");
  EXPECT_EQ(t.monitors[1].type, "csv_monitor");
  EXPECT_EQ(t.monitors[1].params.find("job_name")->as_string(), "run1");
  EXPECT_EQ(t.monitors[2].type, "my_monitor");
  EXPECT_EQ(t.monitors[2].params_path, "plugins.monitors[0].params");
  EXPECT_EQ(json::serialize(t.monitors[2].params), R"({"x":1})");

  ASSERT_TRUE(t.model);
  EXPECT_EQ(t.model->type, "gpt");
  EXPECT_EQ(json::serialize(t.model->params), R"({"n_layer":2})");
  EXPECT_EQ(t.model->params_path, "model");
  EXPECT_EQ(t.data.type, "tokens");
  EXPECT_EQ(t.data.path, "train.bin");
  EXPECT_EQ(t.plugin_paths, std::vector<std::string>{"/opt/plugins"});
  EXPECT_EQ(t.comm.backend, "mpi");
  EXPECT_EQ(t.comm.timeout_ms, 300000);
  EXPECT_EQ(t.train_steps, 100);
  EXPECT_EQ(t.checkpoint_dir, "ckpt");
  EXPECT_EQ(t.seed, 1234u);
}

// The schema is the one place a default is written; the struct only holds
// what the schema filled in.
TEST(TrainingConfigBuild, DefaultsComeFromTheSchema) {
  LoadedConfig c = load(R"({"train_batch_size": 8})");
  ASSERT_TRUE(c.ok());
  const TrainingConfig& t = *c.config;
  EXPECT_EQ(t.steps_per_print, 0);
  EXPECT_FALSE(t.optimizer);
  EXPECT_EQ(t.fp16.loss_scale_window, schema_default({"fp16", "loss_scale_window"}).as_int());
  EXPECT_EQ(t.zero.reduce_bucket_size,
            schema_default({"zero_optimization", "reduce_bucket_size"}).as_int());
  EXPECT_EQ(t.zero.model_persistence_threshold,
            schema_default({"zero_optimization", "model_persistence_threshold"}).as_int());
  EXPECT_EQ(t.zero.max_live_parameters,
            schema_default({"zero_optimization", "max_live_parameters"}).as_int());
  EXPECT_EQ(t.gradient_clipping, 1.0);  // DeepSpeed 0.19.3+
  EXPECT_FALSE(t.communication_data_type);
  EXPECT_FALSE(t.comms_logger.present);
  EXPECT_TRUE(t.monitors.empty());
  EXPECT_FALSE(t.model);
  EXPECT_EQ(t.data.type, "synthetic");
  EXPECT_EQ(t.comm.backend, "auto");
  EXPECT_EQ(t.train_steps, 0);
  EXPECT_EQ(t.seed, 42u);
}

// A section left out that has no default of its own ({} would be a switch,
// like comms_logger) still reads as its keys' schema defaults.
TEST(TrainingConfigBuild, AbsentSectionsReadAsTheirSchemaDefaults) {
  LoadedConfig c = load(R"({"train_batch_size": 8})");
  ASSERT_TRUE(c.ok());
  const TrainingConfig& t = *c.config;
  EXPECT_FALSE(t.comms_logger.present);
  EXPECT_TRUE(t.comms_logger.prof_all);
  EXPECT_FALSE(t.activation_checkpointing.present);
  EXPECT_FALSE(t.activation_checkpointing.number_checkpoints);
  EXPECT_EQ(t.flops_profiler.profile_step, 1);
  EXPECT_EQ(t.flops_profiler.module_depth, -1);
  EXPECT_TRUE(t.flops_profiler.detailed);
  EXPECT_EQ(t.flops_profiler.output_file, "");
  EXPECT_EQ(t.checkpoint.tag_validation, "WARN");
  EXPECT_TRUE(t.data.shuffle);
  EXPECT_EQ(t.comm.timeout_ms, 300000);
  EXPECT_TRUE(t.zero_force_ds_cpu_optimizer);
  EXPECT_EQ(t.gradient_predivide_factor, 1.0);
  EXPECT_FALSE(t.zero.offload_param);
  EXPECT_FALSE(t.zero.offload_optimizer);
  EXPECT_TRUE(t.plugin_paths.empty());
}

// offload_param and offload_optimizer share one struct but not their
// defaults (DeepSpeed: 5 and 4 buffers).
TEST(TrainingConfigBuild, EachOffloadSectionGetsItsOwnDefaults) {
  LoadedConfig c = load(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_param": {}, "offload_optimizer": {"device": "cpu"}}})");
  ASSERT_TRUE(c.ok()) << messages(c)[0];
  const ZeroConfig& z = c.config->zero;
  ASSERT_TRUE(z.offload_param);
  ASSERT_TRUE(z.offload_optimizer);
  EXPECT_EQ(z.offload_param->device, OffloadDevice::kNone);
  EXPECT_EQ(z.offload_param->buffer_count, 5);
  EXPECT_EQ(z.offload_param->buffer_size, 100000000);
  EXPECT_EQ(z.offload_optimizer->device, OffloadDevice::kCpu);
  EXPECT_EQ(z.offload_optimizer->buffer_count, 4);
  EXPECT_EQ(z.offload_optimizer->ratio, 1.0);
  EXPECT_TRUE(z.overlap_comm);  // config_rules: stage 3 without the key
}

// Every key of the schema either fills a TrainingConfig member or is
// deliberately not read into it. A key added to the schema without a
// binding fails here until it gets one (or joins this list, with a reason).
TEST(TrainingConfigBuild, EveryKeyIsBoundOrDeliberatelyUnread) {
  std::vector<std::string> unbound;
  std::function<void(const ObjectSpec&, const std::string&)> walk = [&](const ObjectSpec& spec,
                                                                        const std::string& path) {
    for (const FieldSpec& f : spec.fields) {
      const std::string p = path.empty() ? f.name : path + "." + f.name;
      // Also skipped: keys that are an error when given (removed features,
      // misplaced forms) and unsupported features, whose one accepted value
      // is the behaviour dscore has anyway.
      if (f.not_used || !f.replaced_by.empty() || !f.deprecated.empty() || !f.error.empty() ||
          !f.unsupported_what.empty())
        continue;
      if (!f.binding) {
        unbound.push_back(p);
        continue;
      }
      if (f.binding->open && f.object) walk(*f.object, p);  // a section's own keys
    }
  };
  walk(deepspeed_schema(), "");
  EXPECT_EQ(unbound, (std::vector<std::string>{
                         "zero_optimization.legacy_stage1",  // true is an error (config_rules.cc)
                         "checkpoint.parallel_write",  // accepted; no pipeline stages to write
                         "timers",                     // accepted; step timing ignores it
                     }));
}

TEST(TrainingConfigBuild, OptimizerWithoutParamsGetsAnEmptyObject) {
  LoadedConfig c = load(R"({"train_batch_size": 8, "optimizer": {"type": "SGD"}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.config->optimizer->params, json::Value::object());
  EXPECT_EQ(c.config->optimizer->params.location.line, 1);
}

}  // namespace
}  // namespace dscore::config
