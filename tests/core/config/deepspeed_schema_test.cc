// Tests for the ds_config.json schema (core/config/deepspeed_schema*.cc),
// through load_config_text: DeepSpeed's defaults (spot-checked against the
// docs/deepspeed-reference.md table named in each test), aliases, deprecated keys,
// unknown keys at every level, wrong types, and which keys take "auto".
#include "core/config/deepspeed_schema.h"

#include <gtest/gtest.h>

#include "core/config/config.h"

namespace dscore::config {
namespace {

LoadedConfig load(const std::string& text, ResolveContext ctx = {}) {
  return load_config_text(text, "ds.json", ctx);
}

// A minimal valid config plus `extra` members.
LoadedConfig load_with(const std::string& extra, ResolveContext ctx = {}) {
  return load("{\"train_batch_size\": 8" + (extra.empty() ? "" : ", " + extra) + "}", ctx);
}

const json::Value& at(const json::Value& v, std::initializer_list<const char*> keys) {
  static const json::Value kMissing("<missing>");
  const json::Value* cur = &v;
  for (const char* k : keys) {
    cur = cur->is_object() ? cur->find(k) : nullptr;
    if (!cur) return kMissing;
  }
  return *cur;
}

std::string errors_of(const LoadedConfig& c) {
  std::string out;
  for (const ConfigError& e : c.errors) out += format_error(e, c.source_name) + "\n";
  return out;
}

bool has_notice(const LoadedConfig& c, const std::string& path, const std::string& fragment) {
  for (const ConfigNotice& n : c.notices)
    if (n.path == path && n.message.find(fragment) != std::string::npos) return true;
  return false;
}

// docs/deepspeed-reference.md#top-level-keys (top-level defaults).
TEST(DeepSpeedSchema, TopLevelDefaults) {
  LoadedConfig c = load_with("");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& r = c.resolved;
  EXPECT_EQ(at(r, {"gradient_clipping"}), json::Value(1.0));
  EXPECT_EQ(at(r, {"zero_allow_untested_optimizer"}), json::Value(false));
  EXPECT_EQ(at(r, {"zero_force_ds_cpu_optimizer"}), json::Value(true));
  EXPECT_EQ(at(r, {"prescale_gradients"}), json::Value(false));
  EXPECT_EQ(at(r, {"gradient_predivide_factor"}), json::Value(1.0));
  EXPECT_EQ(r.find("seq_parallel_comm_data_type"), nullptr);           // renamed after 0.16.0
  EXPECT_EQ(r.find("seq_parallel_communication_data_type"), nullptr);  // None in 0.19
  EXPECT_EQ(at(r, {"managed_gradient_accumulation"}), json::Value(true));
  EXPECT_EQ(at(r, {"gradient_allreduce_op"}), json::Value("mean"));
  EXPECT_EQ(at(r, {"wall_clock_breakdown"}), json::Value(false));
  EXPECT_EQ(r.find("steps_per_print"), nullptr);  // None since v0.15.2
  EXPECT_EQ(r.find("communication_data_type"), nullptr);
  EXPECT_EQ(r.find("optimizer"), nullptr);
  // Presence matters (docs/deepspeed-reference.md#comms-logger).
  EXPECT_EQ(r.find("comms_logger"), nullptr);
  // dscore's own sections.
  EXPECT_EQ(at(r, {"seed"}), json::Value(42));
  EXPECT_EQ(at(r, {"data", "type"}), json::Value("synthetic"));
  EXPECT_EQ(at(r, {"comm", "backend"}), json::Value("auto"));
  EXPECT_EQ(at(r, {"comm", "timeout_ms"}), json::Value(300000));
}

// docs/deepspeed-reference.md#precision-sections.
TEST(DeepSpeedSchema, PrecisionDefaults) {
  LoadedConfig c = load_with("");
  const json::Value& fp16 = at(c.resolved, {"fp16"});
  EXPECT_EQ(at(fp16, {"enabled"}), json::Value(false));
  EXPECT_EQ(at(fp16, {"auto_cast"}), json::Value(false));
  EXPECT_EQ(at(fp16, {"loss_scale"}), json::Value(0));
  EXPECT_EQ(at(fp16, {"initial_scale_power"}), json::Value(16));
  EXPECT_EQ(at(fp16, {"loss_scale_window"}), json::Value(1000));
  EXPECT_EQ(at(fp16, {"hysteresis"}), json::Value(2));
  EXPECT_EQ(at(fp16, {"consecutive_hysteresis"}), json::Value(false));
  EXPECT_EQ(at(fp16, {"min_loss_scale"}), json::Value(1));
  EXPECT_EQ(at(fp16, {"fp16_master_weights_and_grads"}), json::Value(false));
  EXPECT_EQ(at(c.resolved, {"bf16", "enabled"}), json::Value(false));
  EXPECT_EQ(at(c.resolved, {"bf16", "immediate_grad_update"}), json::Value(false));
}

// docs/deepspeed-reference.md#zero-optimization-keys (verified pydantic defaults), and item 13
// of docs/deepspeed-reference.md#common-mistakes.
TEST(DeepSpeedSchema, ZeroDefaults) {
  LoadedConfig c = load_with("");
  const json::Value& z = at(c.resolved, {"zero_optimization"});
  EXPECT_EQ(at(z, {"stage"}), json::Value(0));
  EXPECT_EQ(at(z, {"contiguous_gradients"}), json::Value(true));
  EXPECT_EQ(at(z, {"reduce_scatter"}), json::Value(true));
  EXPECT_EQ(at(z, {"reduce_bucket_size"}), json::Value(int64_t{500000000}));
  EXPECT_EQ(at(z, {"use_multi_rank_bucket_allreduce"}), json::Value(true));
  EXPECT_EQ(at(z, {"allgather_partitions"}), json::Value(true));
  EXPECT_EQ(at(z, {"allgather_bucket_size"}), json::Value(int64_t{500000000}));
  EXPECT_EQ(at(z, {"overlap_comm"}), json::Value(false));
  EXPECT_EQ(at(z, {"load_from_fp32_weights"}), json::Value(true));
  EXPECT_EQ(at(z, {"elastic_checkpoint"}), json::Value(false));
  EXPECT_EQ(z.find("offload_param"), nullptr);
  EXPECT_EQ(z.find("offload_optimizer"), nullptr);
  EXPECT_EQ(at(z, {"sub_group_size"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"prefetch_bucket_size"}), json::Value(int64_t{50000000}));
  EXPECT_EQ(at(z, {"param_persistence_threshold"}), json::Value(int64_t{100000}));
  EXPECT_EQ(at(z, {"model_persistence_threshold"}), json::Value(int64_t{INT64_MAX}));
  EXPECT_EQ(at(z, {"max_live_parameters"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"max_reuse_distance"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"gather_16bit_weights_on_model_save"}), json::Value(false));
  EXPECT_EQ(at(z, {"module_granularity_threshold"}), json::Value(0));
  EXPECT_EQ(at(z, {"use_all_reduce_for_fetch_params"}), json::Value(false));
  EXPECT_EQ(at(z, {"ignore_unused_parameters"}), json::Value(true));
  EXPECT_EQ(at(z, {"legacy_stage1"}), json::Value(false));
  EXPECT_EQ(at(z, {"round_robin_gradients"}), json::Value(false));
  EXPECT_EQ(at(z, {"zero_hpz_partition_size"}), json::Value(1));
  EXPECT_EQ(z.find("mics_shard_size"), nullptr);  // removed from DeepSpeed: an error
  EXPECT_EQ(at(z, {"compute_grad_norm"}), json::Value(true));
  EXPECT_EQ(at(z, {"parameter_alignment"}), json::Value(false));
  EXPECT_EQ(at(z, {"memory_efficient_linear"}), json::Value(true));
  EXPECT_EQ(at(z, {"override_module_apply"}), json::Value(true));
}

// docs/deepspeed-reference.md#offload; test_zero_config.py: {} builds defaults, absent/null stays
// None.
// docs/config-auto.md#offload-and-aio-sizes: "auto" in the offload and aio
// sizes gives DeepSpeed's default, and says so.
TEST(DeepSpeedSchema, OffloadAndAioAutoGiveTheDefault) {
  LoadedConfig c = load_with(R"("zero_optimization": {"stage": 3, "sub_group_size": "auto",
      "stage3_model_persistence_threshold": "auto",
      "offload_param": {"device": "cpu", "buffer_count": "auto", "buffer_size": "auto",
                        "max_in_cpu": "auto", "pin_memory": "auto"},
      "offload_optimizer": {"device": "cpu", "buffer_count": "auto", "pin_memory": "auto"}},
      "aio": {"block_size": "auto", "queue_depth": "auto", "intra_op_parallelism": "auto",
              "single_submit": "auto", "overlap_events": "auto"})");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& z = at(c.resolved, {"zero_optimization"});
  EXPECT_EQ(at(z, {"sub_group_size"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"model_persistence_threshold"}), json::Value(INT64_MAX));
  EXPECT_EQ(at(z, {"offload_param", "buffer_count"}), json::Value(5));
  EXPECT_EQ(at(z, {"offload_param", "buffer_size"}), json::Value(int64_t{100000000}));
  EXPECT_EQ(at(z, {"offload_param", "max_in_cpu"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"offload_param", "pin_memory"}), json::Value(true));
  EXPECT_EQ(at(z, {"offload_optimizer", "buffer_count"}), json::Value(4));
  EXPECT_EQ(at(z, {"offload_optimizer", "pin_memory"}), json::Value(true));
  EXPECT_EQ(at(c.resolved, {"aio", "block_size"}), json::Value(1048576));
  EXPECT_EQ(at(c.resolved, {"aio", "queue_depth"}), json::Value(8));
  EXPECT_EQ(at(c.resolved, {"aio", "intra_op_parallelism"}), json::Value(1));
  EXPECT_EQ(at(c.resolved, {"aio", "single_submit"}), json::Value(false));
  EXPECT_EQ(at(c.resolved, {"aio", "overlap_events"}), json::Value(true));
  EXPECT_TRUE(
      has_notice(c, "zero_optimization.offload_param.buffer_size", "\"auto\" -> 100000000"));
  // Where no rule exists, "auto" is still refused.
  EXPECT_FALSE(load_with(R"("zero_optimization": {"offload_optimizer": {"ratio": "auto"}})").ok());
}

TEST(DeepSpeedSchema, OffloadDefaults) {
  LoadedConfig c = load_with(
      R"("zero_optimization": {"stage": 3, "offload_param": {}, "offload_optimizer": {}})");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& p = at(c.resolved, {"zero_optimization", "offload_param"});
  EXPECT_EQ(at(p, {"device"}), json::Value("none"));
  EXPECT_EQ(p.find("nvme_path"), nullptr);
  EXPECT_EQ(at(p, {"buffer_count"}), json::Value(5));
  EXPECT_EQ(at(p, {"buffer_size"}), json::Value(int64_t{100000000}));
  EXPECT_EQ(at(p, {"max_in_cpu"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(p, {"pin_memory"}), json::Value(true));
  const json::Value& o = at(c.resolved, {"zero_optimization", "offload_optimizer"});
  EXPECT_EQ(at(o, {"device"}), json::Value("none"));
  EXPECT_EQ(at(o, {"buffer_count"}), json::Value(4));
  EXPECT_EQ(at(o, {"pin_memory"}), json::Value(true));
  EXPECT_EQ(at(o, {"pipeline_read"}), json::Value(false));
  EXPECT_EQ(at(o, {"pipeline_write"}), json::Value(false));
  EXPECT_EQ(at(o, {"fast_init"}), json::Value(false));
  EXPECT_EQ(at(o, {"ratio"}), json::Value(1.0));

  LoadedConfig null_offload = load_with(R"("zero_optimization": {"offload_optimizer": null})");
  ASSERT_TRUE(null_offload.ok());
  EXPECT_EQ(at(null_offload.resolved, {"zero_optimization"}).find("offload_optimizer"), nullptr);
}

// docs/deepspeed-reference.md#aio and #deprecated-keys-and-aliases (thread_count renamed in
// 0.16.4).
TEST(DeepSpeedSchema, AioDefaultsAndThreadCount) {
  LoadedConfig c = load_with("");
  const json::Value& aio = at(c.resolved, {"aio"});
  EXPECT_EQ(at(aio, {"block_size"}), json::Value(1048576));
  EXPECT_EQ(at(aio, {"queue_depth"}), json::Value(8));
  EXPECT_EQ(at(aio, {"intra_op_parallelism"}), json::Value(1));
  EXPECT_EQ(at(aio, {"single_submit"}), json::Value(false));
  EXPECT_EQ(at(aio, {"overlap_events"}), json::Value(true));
  EXPECT_EQ(at(aio, {"use_gds"}), json::Value(false));

  LoadedConfig old = load_with(R"("aio": {"thread_count": 4})");
  ASSERT_TRUE(old.ok()) << errors_of(old);
  EXPECT_EQ(at(old.resolved, {"aio", "intra_op_parallelism"}), json::Value(4));
  EXPECT_EQ(at(old.resolved, {"aio"}).find("thread_count"), nullptr);
  EXPECT_TRUE(has_notice(old, "aio.thread_count", "intra_op_parallelism"));
}

// docs/deepspeed-reference.md#top-level-keys (sections), #monitors and #comms-logger.
TEST(DeepSpeedSchema, SectionDefaults) {
  LoadedConfig c = load_with(
      R"("tensorboard": {}, "csv_monitor": {}, "wandb": {}, "comet": {}, "comms_logger": {},
         "timers": {"throughput": {}}, "flops_profiler": {}, "hybrid_engine": {},
         "activation_checkpointing": {})");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& r = c.resolved;
  EXPECT_EQ(at(r, {"tensorboard", "enabled"}), json::Value(false));
  EXPECT_EQ(at(r, {"tensorboard", "output_path"}), json::Value(""));
  EXPECT_EQ(at(r, {"tensorboard", "job_name"}), json::Value("DeepSpeedJobName"));
  EXPECT_EQ(at(r, {"csv_monitor", "job_name"}), json::Value("DeepSpeedJobName"));
  EXPECT_EQ(at(r, {"wandb", "project"}), json::Value("deepspeed"));
  EXPECT_EQ(at(r, {"wandb"}).find("team"), nullptr);
  EXPECT_EQ(at(r, {"comet", "samples_log_interval"}), json::Value(100));
  EXPECT_EQ(at(r, {"comms_logger", "enabled"}), json::Value(false));
  EXPECT_EQ(at(r, {"comms_logger", "prof_all"}), json::Value(true));
  EXPECT_EQ(at(r, {"comms_logger", "prof_ops"}), json::Value::array());
  EXPECT_EQ(at(r, {"timers", "throughput", "enabled"}), json::Value(true));
  EXPECT_EQ(at(r, {"timers", "throughput", "synchronized"}), json::Value(true));
  EXPECT_EQ(at(r, {"flops_profiler", "top_modules"}), json::Value(1));
  EXPECT_EQ(at(r, {"flops_profiler", "module_depth"}), json::Value(-1));
  EXPECT_EQ(at(r, {"flops_profiler", "detailed"}), json::Value(true));
  EXPECT_EQ(at(r, {"hybrid_engine", "max_out_tokens"}), json::Value(512));
  EXPECT_EQ(at(r, {"hybrid_engine", "tp_gather_partition_size"}), json::Value(8));
  EXPECT_EQ(at(r, {"checkpoint", "tag_validation"}), json::Value("WARN"));
  EXPECT_EQ(at(r, {"checkpoint", "load_universal"}), json::Value(false));
  EXPECT_EQ(at(r, {"activation_checkpointing", "partition_activations"}), json::Value(false));
  EXPECT_EQ(at(r, {"activation_checkpointing"}).find("number_checkpoints"), nullptr);
  // Sections dscore does not act on say so.
  EXPECT_TRUE(has_notice(c, "hybrid_engine", "not used by dscore"));
  EXPECT_FALSE(has_notice(c, "flops_profiler", "not used by dscore"));  // the engine profiles
}

// docs/deepspeed-reference.md#deprecated-keys-and-aliases / test_ds_config_dict.py: bf16 and
// bfloat16 are equivalent.
TEST(DeepSpeedSchema, Bfloat16IsBf16) {
  LoadedConfig a = load_with(R"("bf16": {"enabled": true})");
  LoadedConfig b = load_with(R"("bfloat16": {"enabled": true})");
  ASSERT_TRUE(a.ok() && b.ok()) << errors_of(b);
  EXPECT_EQ(a.resolved, b.resolved);
  EXPECT_TRUE(b.config->bf16.enabled);
  LoadedConfig both = load_with(R"("bf16": {"enabled": true}, "bfloat16": {"enabled": false})");
  EXPECT_EQ(errors_of(both),
            "ds.json:1:52: bfloat16: \"bf16\" and \"bfloat16\" are two spellings of the same key; "
            "give only one\n");
}

// docs/deepspeed-reference.md#deprecated-keys-and-aliases: stage3_ aliases, both spellings an
// error.
TEST(DeepSpeedSchema, Stage3Aliases) {
  LoadedConfig c = load_with(
      R"("zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1, "stage3_param_persistence_threshold": 2,
         "stage3_model_persistence_threshold": 3, "stage3_max_live_parameters": 4, "stage3_max_reuse_distance": 5,
         "stage3_gather_16bit_weights_on_model_save": true, "stage3_module_granularity_threshold": 6,
         "stage3_use_all_reduce_for_fetch_params": true})");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& z = at(c.resolved, {"zero_optimization"});
  EXPECT_EQ(at(z, {"prefetch_bucket_size"}), json::Value(1));
  EXPECT_EQ(at(z, {"param_persistence_threshold"}), json::Value(2));
  EXPECT_EQ(at(z, {"model_persistence_threshold"}), json::Value(3));
  EXPECT_EQ(at(z, {"max_live_parameters"}), json::Value(4));
  EXPECT_EQ(at(z, {"max_reuse_distance"}), json::Value(5));
  EXPECT_EQ(at(z, {"gather_16bit_weights_on_model_save"}), json::Value(true));
  EXPECT_EQ(at(z, {"module_granularity_threshold"}), json::Value(6));
  EXPECT_EQ(at(z, {"use_all_reduce_for_fetch_params"}), json::Value(true));
  EXPECT_EQ(c.config->zero.prefetch_bucket_size, 1);

  LoadedConfig both = load_with(
      R"("zero_optimization": {"max_live_parameters": 1, "stage3_max_live_parameters": 2})");
  EXPECT_EQ(
      errors_of(both),
      "ds.json:1:73: zero_optimization.stage3_max_live_parameters: \"max_live_parameters\" and "
      "\"stage3_max_live_parameters\" are two spellings of the same key; give only one\n");
}

// docs/deepspeed-reference.md#deprecated-keys-and-aliases / test_zero_config.py: deprecated keys
// and their mapping.
TEST(DeepSpeedSchema, DeprecatedZeroKeysMap) {
  LoadedConfig c =
      load_with(R"("zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true,
                                "cpu_offload_use_pin_memory": false, "stage3_gather_fp16_weights_on_model_save": true})");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& z = at(c.resolved, {"zero_optimization"});
  EXPECT_EQ(at(z, {"offload_optimizer", "device"}), json::Value("cpu"));
  EXPECT_EQ(at(z, {"offload_optimizer", "buffer_count"}), json::Value(4));
  EXPECT_EQ(at(z, {"offload_param", "device"}), json::Value("cpu"));
  EXPECT_EQ(at(z, {"offload_param", "buffer_count"}), json::Value(5));
  EXPECT_EQ(at(z, {"gather_16bit_weights_on_model_save"}), json::Value(true));
  for (const char* old : {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
                          "stage3_gather_fp16_weights_on_model_save"}) {
    EXPECT_EQ(z.find(old), nullptr) << old;
    EXPECT_TRUE(has_notice(c, std::string("zero_optimization.") + old, "deprecated")) << old;
  }
  // pin memory is not transferred (as in DeepSpeed): the default stays.
  EXPECT_EQ(at(z, {"offload_optimizer", "pin_memory"}), json::Value(true));
  EXPECT_EQ(c.config->zero.offload_optimizer->device, OffloadDevice::kCpu);

  LoadedConfig off = load_with(R"("zero_optimization": {"cpu_offload": false})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(at(off.resolved, {"zero_optimization"}).find("offload_optimizer"), nullptr);
}

TEST(DeepSpeedSchema, DeprecatedTogetherWithReplacementIsDeepSpeedsError) {
  LoadedConfig c = load_with(
      R"("zero_optimization": {"cpu_offload": true, "offload_optimizer": {"device": "cpu"}})");
  EXPECT_EQ(errors_of(c),
            "ds.json:1:47: zero_optimization.cpu_offload: Cannot provide deprecated parameter "
            "'cpu_offload' and "
            "replacing parameter 'offload_optimizer' together\n");
  LoadedConfig gather = load_with(
      R"("zero_optimization": {"stage3_gather_fp16_weights_on_model_save": true, "stage3_gather_16bit_weights_on_model_save": true})");
  EXPECT_EQ(errors_of(gather),
            "ds.json:1:47: zero_optimization.stage3_gather_fp16_weights_on_model_save: Cannot "
            "provide deprecated "
            "parameter 'stage3_gather_fp16_weights_on_model_save' and replacing parameter "
            "'gather_16bit_weights_on_model_save' together\n");
}

// docs/deepspeed-reference.md#deprecated-keys-and-aliases: zero_optimization: true|false.
TEST(DeepSpeedSchema, LegacyBooleanZero) {
  LoadedConfig on = load_with(R"("zero_optimization": true, "allgather_size": 1000)");
  ASSERT_TRUE(on.ok()) << errors_of(on);
  EXPECT_EQ(at(on.resolved, {"zero_optimization", "stage"}), json::Value(1));
  EXPECT_EQ(at(on.resolved, {"zero_optimization", "allgather_bucket_size"}), json::Value(1000));
  EXPECT_TRUE(has_notice(on, "zero_optimization", "boolean form is deprecated"));
  LoadedConfig off = load_with(R"("zero_optimization": false)");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(at(off.resolved, {"zero_optimization", "stage"}), json::Value(0));
  EXPECT_EQ(at(off.resolved, {"zero_optimization", "allgather_bucket_size"}),
            json::Value(int64_t{500000000}));
}

TEST(DeepSpeedSchema, UnknownKeysAtEveryLevel) {
  LoadedConfig top =
      load("{\n  \"train_batch_size\": 8,\n  \"zero_optimisation\": {\"stage\": 2}\n}");
  EXPECT_EQ(errors_of(top),
            "ds.json:3:3: zero_optimisation: unknown key \"zero_optimisation\"; did you mean "
            "\"zero_optimization\"?\n");
  LoadedConfig typo = load_with(R"("train_batch_sise": 4)");
  EXPECT_EQ(errors_of(typo),
            "ds.json:1:25: train_batch_sise: unknown key \"train_batch_sise\"; did you mean "
            "\"train_batch_size\"?\n");
  LoadedConfig nested =
      load_with(R"("zero_optimization": {"offload_optimizer": {"devcie": "cpu"}})");
  EXPECT_EQ(errors_of(nested),
            "ds.json:1:69: zero_optimization.offload_optimizer.devcie: unknown key \"devcie\"; did "
            "you mean "
            "\"device\"?\n");
  // Plain-dict sections in DeepSpeed (fp16, aio, ...) are checked too.
  LoadedConfig fp16 = load_with(R"("fp16": {"enabled": true, "loss_scale_windw": 100})");
  EXPECT_EQ(errors_of(fp16),
            "ds.json:1:51: fp16.loss_scale_windw: unknown key \"loss_scale_windw\"; did you mean "
            "\"loss_scale_window\"?\n");
}

TEST(DeepSpeedSchema, WrongTypesAndBounds) {
  LoadedConfig c =
      load_with(R"("zero_optimization": {"stage": "2", "offload_optimizer": {"device": "gpu"}},
                              "gradient_clipping": "1.0", "fp16": {"enabled": 1})");
  ASSERT_EQ(c.errors.size(), 4u) << errors_of(c);
  EXPECT_EQ(format_error(c.errors[0], "ds.json"),
            "ds.json:1:56: zero_optimization.stage: expected an int, got string \"2\"");
  EXPECT_EQ(format_error(c.errors[1], "ds.json"),
            "ds.json:1:93: zero_optimization.offload_optimizer.device: expected one of \"none\", "
            "\"cpu\", "
            "\"nvme\", got \"gpu\"; did you mean \"cpu\"?");
  EXPECT_EQ(c.errors[2].path, "gradient_clipping");
  EXPECT_EQ(c.errors[3].path, "fp16.enabled");
  LoadedConfig stage4 = load_with(R"("zero_optimization": {"stage": 4})");
  EXPECT_EQ(stage4.errors.at(0).message, "must be between 0 and 3, got 4");
  LoadedConfig big = load_with(
      R"("zero_optimization": {"reduce_bucket_size": 5e8, "allgather_bucket_size": 2.5e8})");
  ASSERT_TRUE(big.ok()) << errors_of(big);
  EXPECT_EQ(big.config->zero.reduce_bucket_size, 500000000);
  LoadedConfig half = load_with(R"("zero_optimization": {"reduce_bucket_size": 2.5e8})");
  EXPECT_TRUE(half.ok());
  LoadedConfig fraction = load_with(R"("zero_optimization": {"reduce_bucket_size": 250000000.5})");
  EXPECT_EQ(fraction.errors.at(0).message, "expected an int, got number 250000000.5");
}

// DeepSpeed 0.19 (precision_config.py) refuses a dynamic loss scaler whose
// window or minimum scale is <= 0, and takes min_loss_scale as an integer.
TEST(DeepSpeedSchema, LossScalerBoundsFollowDeepSpeed) {
  LoadedConfig zero_min = load_with(R"("fp16": {"enabled": true, "min_loss_scale": 0})");
  EXPECT_EQ(errors_of(zero_min), "ds.json:1:69: fp16.min_loss_scale: must be >= 1, got 0\n");
  LoadedConfig fraction = load_with(R"("fp16": {"enabled": true, "min_loss_scale": 0.25})");
  EXPECT_EQ(fraction.errors.at(0).message, "expected an int, got number 0.25");
  LoadedConfig window = load_with(R"("fp16": {"enabled": true, "loss_scale_window": 0})");
  EXPECT_EQ(window.errors.at(0).message, "must be >= 1, got 0");
  LoadedConfig ok = load_with(R"("fp16": {"enabled": true, "min_loss_scale": 4})");
  ASSERT_TRUE(ok.ok()) << errors_of(ok);
  EXPECT_EQ(ok.config->fp16.min_loss_scale, 4.0);
}

// docs/deepspeed-reference.md#top-level-keys: checkpoint.tag_validation and
// communication_data_type.
TEST(DeepSpeedSchema, CaseInsensitiveEnumsWithDeepSpeedsMessages) {
  LoadedConfig ok =
      load_with(R"("checkpoint": {"tag_validation": "fail"}, "communication_data_type": "BF16")");
  ASSERT_TRUE(ok.ok()) << errors_of(ok);
  EXPECT_EQ(ok.config->checkpoint.tag_validation, "FAIL");
  EXPECT_EQ(*ok.config->communication_data_type, "bf16");
  LoadedConfig bad =
      load_with(R"("checkpoint": {"tag_validation": "foo"}, "communication_data_type": "int8")");
  ASSERT_EQ(bad.errors.size(), 2u);
  EXPECT_EQ(bad.errors[0].message,
            "Checkpoint config contains invalid tag_validation value of foo, expecting one of "
            "['WARN', 'IGNORE', 'FAIL']");
  EXPECT_EQ(
      bad.errors[1].message,
      "Invalid communication_data_type. Supported data types: ['fp16', 'bf16', 'fp32']. Got: int8");
}

TEST(DeepSpeedSchema, AutoAcceptedWhereARuleExists) {
  ResolveContext ctx;
  ctx.hidden_size = 1024;
  LoadedConfig c = load(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": "auto",
      "stage3_max_reuse_distance": "auto", "stage3_gather_16bit_weights_on_model_save": "auto"}})",
                        ctx);
  ASSERT_TRUE(c.ok()) << errors_of(c);
  const json::Value& z = at(c.resolved, {"zero_optimization"});
  EXPECT_EQ(at(z, {"reduce_bucket_size"}), json::Value(int64_t{1048576}));
  EXPECT_EQ(at(z, {"prefetch_bucket_size"}),
            json::Value(int64_t{943718}));  // int(0.9 * 1024 * 1024)
  EXPECT_EQ(at(z, {"param_persistence_threshold"}), json::Value(int64_t{10240}));
  EXPECT_EQ(at(z, {"max_live_parameters"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"max_reuse_distance"}), json::Value(int64_t{1000000000}));
  EXPECT_EQ(at(z, {"gather_16bit_weights_on_model_save"}), json::Value(false));
  EXPECT_EQ(at(c.resolved, {"gradient_clipping"}), json::Value(1.0));
  EXPECT_EQ(at(c.resolved, {"fp16", "enabled"}), json::Value(false));
  EXPECT_EQ(at(c.resolved, {"bf16", "enabled"}), json::Value(false));
  EXPECT_EQ(c.config->batch.train_batch_size, 2);
  EXPECT_EQ(c.config->batch.gradient_accumulation_steps, 1);
  EXPECT_TRUE(has_notice(c, "zero_optimization.reduce_bucket_size", "\"auto\" -> 1048576"));
  EXPECT_TRUE(has_notice(c, "gradient_clipping", "\"auto\" -> 1.0"));
  EXPECT_TRUE(has_notice(c, "train_batch_size", "\"auto\" -> 2"));
}

TEST(DeepSpeedSchema, AutoRejectedElsewhereSayingWhatDeepSpeedWouldDo) {
  LoadedConfig stage = load_with(R"("zero_optimization": {"stage": "auto"})");
  EXPECT_EQ(errors_of(stage),
            "ds.json:1:56: zero_optimization.stage: \"auto\" is not accepted here; DeepSpeed would "
            "silently drop it "
            "and run ZeRO stage 0; give 0-3\n");
  LoadedConfig bucket = load_with(R"("zero_optimization": {"allgather_bucket_size": "auto"})");
  EXPECT_EQ(bucket.errors.at(0).message,
            "\"auto\" is not accepted here; DeepSpeed would silently drop it and use the default "
            "500000000; give an int");
  LoadedConfig spp = load_with(R"("steps_per_print": "auto")");
  EXPECT_EQ(spp.errors.at(0).message, "\"auto\" is not accepted here; give an int");
  LoadedConfig device =
      load_with(R"("zero_optimization": {"offload_optimizer": {"device": "auto"}})");
  EXPECT_EQ(device.errors.at(0).path, "zero_optimization.offload_optimizer.device");
  EXPECT_NE(device.errors.at(0).message.find("\"auto\" is not accepted here"), std::string::npos);
}

TEST(DeepSpeedSchema, DscoreSections) {
  LoadedConfig c = load_with(R"("model": {"type": "gpt", "n_layer": 2, "hidden_size": "auto"},
    "data": {"type": "text", "path": "input.txt"}, "plugins": {"paths": ["/opt/p"], "monitors": [{"type": "mine"}]},
    "comm": {"backend": "mpi", "timeout_ms": 1000}, "train_steps": 10, "checkpoint_dir": "ckpt", "seed": 7)");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  // "auto" is comm.backend's literal default, not a request for a rule.
  LoadedConfig backend = load_with(R"("comm": {"backend": "auto"})");
  ASSERT_TRUE(backend.ok()) << errors_of(backend);
  EXPECT_EQ(backend.config->comm.backend, "auto");
  // Model params are the model plugin's: kept as written, no notice.
  EXPECT_TRUE(at(c.resolved, {"model", "hidden_size"}).is_auto());
  EXPECT_FALSE(has_notice(c, "model.n_layer", ""));
  LoadedConfig bad =
      load_with(R"("model": {"n_layer": 2}, "data": {"type": "txt"}, "comm": {"timeout_ms": 0},
                                  "plugins": {"monitors": [{"params": {}}]}, "seed": -1)");
  ASSERT_EQ(bad.errors.size(), 5u) << errors_of(bad);
  EXPECT_EQ(bad.errors[0].path, "model.type");
  EXPECT_EQ(bad.errors[0].message, "missing required key \"type\"");
  EXPECT_EQ(
      bad.errors[1].message,
      "expected one of \"synthetic\", \"text\", \"tokens\", got \"txt\"; did you mean \"text\"?");
  EXPECT_EQ(bad.errors[2].path, "comm.timeout_ms");
  EXPECT_EQ(bad.errors[3].path, "plugins.monitors[0].type");
  EXPECT_EQ(bad.errors[4].path, "seed");
}

TEST(DeepSpeedSchema, NamedOnlySectionsAcceptAnyKeys) {
  LoadedConfig c = load_with(
      R"("torch_autocast": {"enabled": false, "anything": [1]},
                                "data_efficiency": {"enabled": false, "seed": 1234})");
  ASSERT_TRUE(c.ok()) << errors_of(c);
  EXPECT_TRUE(has_notice(c, "torch_autocast", "not used by dscore"));
  EXPECT_EQ(at(c.resolved, {"torch_autocast", "anything"}).items().size(), 1u);
}

TEST(DeepSpeedSchema, EveryFieldIsDocumentedAndDefaultsPassTheirOwnChecks) {
  // A default that fails its own field's checks would make every config invalid.
  std::function<void(const ObjectSpec&, const std::string&)> walk = [&](const ObjectSpec& spec,
                                                                        const std::string& path) {
    for (const FieldSpec& f : spec.fields) {
      const std::string p = path.empty() ? f.name : path + "." + f.name;
      EXPECT_FALSE(f.doc.empty()) << p;
      if (f.default_value) {
        ObjectSpec one;
        one.fields.push_back(f);
        json::Value doc = json::Value::object();
        doc.set(f.name, *f.default_value);
        std::vector<ConfigError> errors;
        validate_object(doc, one, "", AutoResolver(), ValidationSink{&errors, nullptr});
        EXPECT_TRUE(errors.empty()) << p << ": " << (errors.empty() ? "" : errors[0].message);
      }
      if (f.object) walk(*f.object, p);
    }
  };
  walk(deepspeed_schema(), "");
}

}  // namespace
}  // namespace dscore::config
