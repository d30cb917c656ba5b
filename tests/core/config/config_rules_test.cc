// Tests for core/config/config_rules.cc: DeepSpeed's cross-key rules with
// DeepSpeed's messages (docs/deepspeed-reference.md#configuration,
// #gradient-averaging, #zero-optimization-keys, #deepspeed-unit-tests), each
// reported with the key's path and position.
#include "core/config/config_rules.h"

#include <gtest/gtest.h>

#include "core/config/config.h"

namespace dscore::config {
namespace {

LoadedConfig load_with(const std::string& extra) {
  return load_config_text("{\"train_batch_size\": 8, " + extra + "}", "ds.json", ResolveContext{});
}

std::string only_error(const LoadedConfig& c) {
  if (c.errors.size() != 1) {
    std::string all = std::to_string(c.errors.size()) + " errors:";
    for (const ConfigError& e : c.errors) all += " [" + e.path + ": " + e.message + "]";
    return all;
  }
  return format_error(c.errors[0], c.source_name);
}

// docs/deepspeed-reference.md#precision-sections.
TEST(ConfigRules, Fp16AndBf16Together) {
  EXPECT_EQ(only_error(load_with(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})")),
            "ds.json:1:72: bf16.enabled: bfloat16 and fp16 modes cannot be simultaneously enabled");
  // Either alone is fine; "auto" resolves to off, so both "auto" is fine too.
  EXPECT_TRUE(load_with(R"("fp16": {"enabled": true})").ok());
  EXPECT_TRUE(load_with(R"("fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"})").ok());
}

// DeepSpeed 0.19's rules for 16-bit masters (runtime/config.py).
TEST(ConfigRules, SixteenBitMastersFollowDeepSpeedsRules) {
  EXPECT_NE(
      only_error(load_with(R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})"))
          .find("fp16.fp16_master_weights_and_grads: fp16_master_weights_and_grads needs ZeRO "
                "stage 1, 2 or 3 with optimizer offload"),
      std::string::npos);
  EXPECT_TRUE(load_with(R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true},
                           "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}})")
                  .ok());
  EXPECT_NE(only_error(load_with(R"("bf16": {"enabled": true,
                                   "bf16_master_weights_and_grads": true})"))
                .find("bf16_master_weights_and_grads needs ZeRO stage 1, 2 or 3"),
            std::string::npos);
  EXPECT_NE(only_error(load_with(R"("bf16": {"enabled": true, "bf16_optimizer_states": true},
                                   "zero_optimization": {"stage": 2})"))
                .find("bf16_optimizer_states requires bf16_master_weights_and_grads"),
            std::string::npos);
  EXPECT_TRUE(load_with(R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                                    "bf16_optimizer_states": true},
                           "zero_optimization": {"stage": 3})")
                  .ok());
}

// docs/deepspeed-reference.md#deprecated-keys-and-aliases.
TEST(ConfigRules, LegacyStage1IsDeepSpeedsError) {
  EXPECT_EQ(only_error(load_with(R"("zero_optimization": {"legacy_stage1": true})")),
            "ds.json:1:64: zero_optimization.legacy_stage1: The deprecated version of ZeRO Stage 1 "
            "is not supported "
            "in deepspeed >= 0.5.9. Please downgrade to a version less than 0.5.9 if you need to "
            "use this deprecated "
            "version of ZeRO.");
  EXPECT_TRUE(load_with(R"("zero_optimization": {"legacy_stage1": false})").ok());
}

// docs/deepspeed-reference.md#config-loading.
TEST(ConfigRules, MaxGradNormInOptimizerParams) {
  EXPECT_EQ(only_error(load_with(
                R"("optimizer": {"type": "Adam", "params": {"lr": 1e-3, "max_grad_norm": 1.0}})")),
            "ds.json:1:78: optimizer.params.max_grad_norm: 'max_grad_norm' is not supported as an "
            "optimizer "
            "parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: "
            "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details");
}

// docs/deepspeed-reference.md#zero-optimization-keys / test_zero_config.py: overlap_comm False for
// 0-2, True for 3.
TEST(ConfigRules, OverlapCommDefaultFollowsTheStage) {
  for (int stage = 0; stage <= 3; ++stage) {
    LoadedConfig c = load_with("\"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.config->zero.overlap_comm, stage == 3) << stage;
    EXPECT_EQ(*c.resolved.find("zero_optimization")->find("overlap_comm"), json::Value(stage == 3));
  }
  EXPECT_FALSE(load_with(R"("zero_optimization": {"stage": 3, "overlap_comm": false})")
                   .config->zero.overlap_comm);
  EXPECT_TRUE(load_with(R"("zero_optimization": {"stage": 1, "overlap_comm": true})")
                  .config->zero.overlap_comm);
}

// docs/deepspeed-reference.md#zero-optimization-keys validator.
TEST(ConfigRules, PartialOffloadNeedsStage3) {
  EXPECT_EQ(
      only_error(load_with(
          R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}})")),
      "ds.json:1:107: zero_optimization.offload_optimizer.ratio: Partial offloading only supported "
      "for ZeRO "
      "Stage 3.");
  // Stage 3 loads it. dscore keeps part of the state on the device with
  // ZeRO-Offload to host memory; otherwise a notice says it offloads all.
  auto ratio_notice = [](const LoadedConfig& c) {
    for (const auto& n : c.notices)
      if (n.path == "zero_optimization.offload_optimizer.ratio") return n.message;
    return std::string();
  };
  const LoadedConfig partial = load_with(
      R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}})");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(ratio_notice(partial), "");
  const LoadedConfig nvme = load_with(
      R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "ratio": 0.5}})");
  ASSERT_TRUE(nvme.ok());
  EXPECT_NE(ratio_notice(nvme).find("the whole optimizer state is offloaded"), std::string::npos)
      << ratio_notice(nvme);
  const LoadedConfig params = load_with(
      R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}, "offload_param": {"device": "cpu"}})");
  ASSERT_TRUE(params.ok());
  EXPECT_NE(ratio_notice(params).find("not with offload_param"), std::string::npos)
      << ratio_notice(params);
}

// docs/deepspeed-reference.md#zero-optimization-keys / TestIncorectAllgatherBucketSize: 1000 ok,
// 1001 fails (stage 1/2).
TEST(ConfigRules, AllgatherBucketSizeMultipleOfTwo) {
  EXPECT_TRUE(
      load_with(R"("zero_optimization": {"stage": 2, "allgather_bucket_size": 1000})").ok());
  EXPECT_EQ(
      only_error(load_with(R"("zero_optimization": {"stage": 2, "allgather_bucket_size": 1001})")),
      "ds.json:1:84: zero_optimization.allgather_bucket_size: allgather_bucket_size must be a "
      "multiple of "
      "nccl_start_alignment_factor, 2");
  EXPECT_FALSE(
      load_with(R"("zero_optimization": {"stage": 1, "allgather_bucket_size": 1001})").ok());
  // Only the stage 1/2 optimizer asserts it.
  EXPECT_TRUE(
      load_with(R"("zero_optimization": {"stage": 3, "allgather_bucket_size": 1001})").ok());
}

// docs/deepspeed-reference.md#gradient-averaging.
TEST(ConfigRules, PredivideAndPrescaleWithReduceScatter) {
  EXPECT_EQ(only_error(load_with(
                R"("gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 2})")),
            "ds.json:1:54: gradient_predivide_factor: gradient_predivide_factor != 1.0 is not yet "
            "supported with "
            "ZeRO-2 with reduce scatter enabled");
  EXPECT_EQ(
      only_error(load_with(R"("prescale_gradients": true, "zero_optimization": {"stage": 3})")),
      "ds.json:1:47: prescale_gradients: pre-scale gradients is not yet supported with ZeRO-3 with "
      "reduce "
      "scatter enabled");
  EXPECT_TRUE(
      load_with(
          R"("prescale_gradients": true, "zero_optimization": {"stage": 2, "reduce_scatter": false})")
          .ok());
  EXPECT_TRUE(
      load_with(R"("gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 1})").ok());
}

// Blocks of features DeepSpeed has removed are rejected when given at all,
// as DeepSpeed 0.19.8 does, with their own kind (not a typo, not lifted by
// allow_unsupported).
TEST(ConfigRules, RemovedFeaturesAreRejected) {
  EXPECT_EQ(only_error(load_with(R"("amp": {"enabled": true, "opt_level": "O1"})")),
            "ds.json:1:25: amp: NVIDIA Apex AMP was removed from DeepSpeed, which now rejects "
            "\"amp\" (DeepSpeed 0.19.8, deepspeedai/DeepSpeed#8489); remove the block and use "
            "\"fp16\" or \"bf16\"");
  for (const char* text :
       {R"("amp": {"enabled": false})", R"("elasticity": {"enabled": false})", R"("nebula": {})",
        R"("sparse_gradients": false)", R"("curriculum_learning": {})",
        R"("compression_training": {})", R"("quantize_training": {"enabled": true})",
        R"("eigenvalue": {})", R"("sparse_attention": {"mode": "fixed"})",
        R"("progressive_layer_drop": {"enabled": true})", R"("graph_harvesting": true)",
        R"("zero_optimization": {"mics_shard_size": 8})",
        R"("zero_optimization": {"zeropp_loco_param": {"err_beta": 0.8}})"}) {
    LoadedConfig c = load_with(text);
    ASSERT_EQ(c.errors.size(), 1u) << text;
    EXPECT_EQ(c.errors[0].kind, ErrorKind::kRemoved) << text;
    EXPECT_NE(c.errors[0].message.find("was removed from DeepSpeed"), std::string::npos) << text;
    ResolveContext lenient;
    lenient.allow_unsupported = true;
    EXPECT_FALSE(
        load_config_text(std::string("{\"train_batch_size\": 1, ") + text + "}", "ds.json", lenient)
            .ok())
        << text;
  }
}

// A key of a DeepSpeed feature dscore does not implement is an error of its
// own kind when it turns the feature on, and a warning with allow_unsupported.
TEST(ConfigRules, UnsupportedFeaturesAreErrorsUnlessAllowed) {
  const std::string text =
      R"({"train_batch_size": 1, "data_efficiency": {"enabled": true},
          "zero_optimization": {"zero_quantized_nontrainable_weights": true}})";
  LoadedConfig strict = load_config_text(text, "ds.json", ResolveContext{});
  ASSERT_EQ(strict.errors.size(), 2u);
  for (const ConfigError& e : strict.errors) {
    EXPECT_EQ(e.kind, ErrorKind::kUnsupported) << e.message;
    EXPECT_NE(e.message.find("not implemented by dscore: "), std::string::npos);
    EXPECT_NE(e.message.find("--allow-unsupported"), std::string::npos);
  }
  EXPECT_EQ(format_error(strict.errors[0], "ds.json").rfind("ds.json:1:25: data_efficiency: ", 0),
            0u)
      << strict.errors[0].message;
  ResolveContext allow;
  allow.allow_unsupported = true;
  LoadedConfig lenient = load_config_text(text, "ds.json", allow);
  ASSERT_TRUE(lenient.ok()) << lenient.errors[0].message;
  int warnings = 0;
  for (const ConfigNotice& n : lenient.notices)
    if (n.message.rfind("warning: not implemented by dscore: ", 0) == 0) ++warnings;
  EXPECT_EQ(warnings, 2);
  for (const ConfigNotice& n : lenient.notices) {
    if (n.message.rfind("warning: ", 0) == 0) {
      EXPECT_TRUE(n.message.ends_with(" (--allow-unsupported: training without it)")) << n.message;
    }
  }
  // Off (enabled false, or the default value): accepted, a notice only.
  EXPECT_TRUE(load_with(R"("data_efficiency": {"enabled": false},
                           "zero_optimization": {"zero_quantized_nontrainable_weights": false})")
                  .ok());
  // A degree: sequence parallelism (Ulysses) over 2 ranks needs them (this
  // world is one rank), a size of 1 (none) accepted, as AutoTP's autotp_size.
  const LoadedConfig ulysses = load_with(R"("sequence_parallel_size": 2)");
  ASSERT_EQ(ulysses.errors.size(), 1u);
  EXPECT_EQ(ulysses.errors[0].path, "sequence_parallel_size");
  EXPECT_NE(ulysses.errors[0].message.find("does not divide the 1 ranks"), std::string::npos)
      << ulysses.errors[0].message;
  EXPECT_TRUE(load_with(R"("sequence_parallel_size": 1)").ok());
  EXPECT_FALSE(load_with(R"("tensor_parallel": {"autotp_size": 2})").ok());
  EXPECT_TRUE(load_with(R"("tensor_parallel": {"autotp_size": 1})").ok());
  // allow_unsupported lifts nothing else.
  LoadedConfig typo =
      load_config_text(R"({"train_batch_size": 1, "autotunnig": {}})", "ds.json", allow);
  ASSERT_EQ(typo.errors.size(), 1u);
  EXPECT_EQ(typo.errors[0].kind, ErrorKind::kInvalid);
}

// The HF guide's NVMe example nests "aio" in "zero_optimization", which
// DeepSpeed rejects; the meaning is plain, so the message names the move.
TEST(ConfigRules, AioInsideZeroNamesTheFix) {
  LoadedConfig c = load_with(R"("zero_optimization": {"stage": 3, "aio": {"block_size": 262144}})");
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0].kind, ErrorKind::kDeepSpeedRejects);
  EXPECT_EQ(c.errors[0].path, "zero_optimization.aio");
  EXPECT_NE(c.errors[0].message.find("move the \"aio\" object out of \"zero_optimization\""),
            std::string::npos)
      << c.errors[0].message;
}

TEST(ConfigRules, OffloadParamBelowStage3IsIgnoredWithANotice) {
  LoadedConfig c =
      load_with(R"("zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}})");
  ASSERT_TRUE(c.ok());
  bool found = false;
  for (const ConfigNotice& n : c.notices)
    found |= n.path == "zero_optimization.offload_param" &&
             n.message.find("ignored at stage 2") != std::string::npos;
  EXPECT_TRUE(found);
}

// Deliberate difference: DeepSpeed crashes on a scheduler without params.
TEST(ConfigRules, SchedulerWithoutParamsIsFine) {
  LoadedConfig c = load_with(R"("scheduler": {"type": "WarmupLR"})");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.config->scheduler);
  EXPECT_EQ(c.config->scheduler->params, json::Value::object());
}

TEST(ConfigRules, LegacyFormsRewriteOnlyTheBooleanZero) {
  std::vector<ConfigNotice> notices;
  json::Value doc = *json::parse(R"({"zero_optimization": {"stage": 2}})", "t");
  json::Value before = doc;
  apply_legacy_forms(&doc, &notices);
  EXPECT_EQ(doc, before);
  EXPECT_TRUE(notices.empty());
}

}  // namespace
}  // namespace dscore::config
