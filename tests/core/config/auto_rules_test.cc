// Tests for core/config/auto_rules.cc: each "auto" rule's value and
// explanation, the fallbacks when an input is unknown, and the error when
// train_steps cannot be resolved. HF Trainer conventions (hidden_size^2,
// int(0.9 * hidden_size^2), 10 * hidden_size, max_grad_norm 1.0) are exact.
#include "core/config/auto_rules.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/config/aio_cache.h"
#include "core/config/config.h"
#include "core/config/schema_builder.h"
#include "tests/core/config/temp_cache_home.h"

namespace dscore::config {
namespace {

FieldSpec int_field(int64_t def) { return F("x", FieldType::kInt, "").def_int(def); }

AutoResolution resolve(const std::string& rule, const ResolveContext& ctx,
                       const char* config_text = "{}", const FieldSpec& field = int_field(7)) {
  json::Value config = *json::parse(config_text, "c");
  return make_auto_resolver(ctx, config)(rule, field, "x");
}

TEST(AutoRules, EveryRuleIsListedAndKnown) {
  std::vector<std::string> names;
  for (const AutoRuleInfo& r : auto_rules()) {
    names.push_back(r.name);
    EXPECT_TRUE(is_known_auto_rule(r.name));
    EXPECT_NE(std::string(r.summary), "");
    // Every listed rule resolves (or explains) without an "unknown rule" error.
    ResolveContext ctx;
    ctx.train_steps = 1;
    EXPECT_EQ(resolve(r.name, ctx).error.find("unknown auto rule"), std::string::npos) << r.name;
  }
  EXPECT_FALSE(is_known_auto_rule("hidden_cubed"));
  EXPECT_NE(resolve("hidden_cubed", {}).error.find("unknown auto rule"), std::string::npos);
}

TEST(AutoRules, DefaultIsTheFieldDefault) {
  AutoResolution r = resolve("default", {}, "{}", int_field(1000000000));
  EXPECT_EQ(*r.value, json::Value(int64_t{1000000000}));
  EXPECT_EQ(r.explanation, "the default");
  FieldSpec no_default = F("y", FieldType::kInt, "");
  AutoResolution none = resolve("default", {}, "{}", no_default);
  EXPECT_FALSE(none.value);
  EXPECT_TRUE(none.error.empty());
}

TEST(AutoRules, BatchLeavesTheKeyForTheBatchRule) {
  AutoResolution r = resolve("batch", {});
  EXPECT_FALSE(r.value);
  EXPECT_TRUE(r.error.empty());
  EXPECT_TRUE(r.explanation.empty());
}

TEST(AutoRules, TrainStepsPrefersTheCommandLine) {
  ResolveContext ctx;
  ctx.train_steps = 250;
  AutoResolution cli = resolve("train_steps", ctx, R"({"train_steps": 100})");
  EXPECT_EQ(cli.value->as_int(), 250);
  EXPECT_EQ(cli.explanation, "from --steps");
  AutoResolution file = resolve("train_steps", {}, R"({"train_steps": 100})");
  EXPECT_EQ(file.value->as_int(), 100);
  AutoResolution neither = resolve("train_steps", {});
  EXPECT_EQ(neither.error, "set \"train_steps\" or pass --steps");
}

TEST(AutoRules, OptimizerLr) {
  AutoResolution given =
      resolve("optimizer_lr", {}, R"({"optimizer": {"type": "Adam", "params": {"lr": 3e-4}}})");
  EXPECT_EQ(given.value->as_number(), 3e-4);
  AutoResolution missing = resolve("optimizer_lr", {}, R"({"optimizer": {"type": "Adam"}})");
  EXPECT_EQ(missing.value->as_number(), 1e-3);
  EXPECT_NE(missing.explanation.find("1e-3"), std::string::npos);
  AutoResolution auto_lr =
      resolve("optimizer_lr", {}, R"({"optimizer": {"params": {"lr": "auto"}}})");
  EXPECT_EQ(auto_lr.value->as_number(), 1e-3);
}

TEST(AutoRules, HiddenSizeRules) {
  ResolveContext ctx;
  ctx.hidden_size = 768;
  EXPECT_EQ(resolve("hidden_squared", ctx).value->as_int(), 589824);
  // HF: int(0.9 * 768 * 768) = int(530841.6) = 530841.
  EXPECT_EQ(resolve("hidden_squared_0_9", ctx).value->as_int(), 530841);
  EXPECT_EQ(resolve("hidden_x10", ctx).value->as_int(), 7680);
  EXPECT_EQ(resolve("hidden_squared", ctx).explanation,
            "hidden_size^2 = 768^2, hidden_size from the model's hidden_size");
}

TEST(AutoRules, HiddenSizeFromTheModelSection) {
  AutoResolution r = resolve("hidden_x10", {}, R"({"model": {"type": "gpt", "hidden_size": 64}})");
  EXPECT_EQ(r.value->as_int(), 640);
  EXPECT_NE(r.explanation.find("model.hidden_size"), std::string::npos);
  // The context wins over the file.
  ResolveContext ctx;
  ctx.hidden_size = 8;
  EXPECT_EQ(resolve("hidden_x10", ctx, R"({"model": {"hidden_size": 64}})").value->as_int(), 80);
}

TEST(AutoRules, HiddenSizeUnknownFallsBackToTheDefault) {
  AutoResolution r = resolve("hidden_squared", {}, "{}", int_field(500000000));
  EXPECT_EQ(r.value->as_int(), 500000000);
  EXPECT_EQ(r.explanation, "hidden_size unknown here: the default");
}

TEST(AutoRules, HiddenSizeTooLargeIsAnError) {
  ResolveContext ctx;
  ctx.hidden_size = int64_t{1} << 40;
  EXPECT_NE(resolve("hidden_squared", ctx).error.find("too large"), std::string::npos);
}

TEST(AutoRules, GradientClippingAndPrecision) {
  FieldSpec number = F("gradient_clipping", FieldType::kNumber, "").def(0.0);
  AutoResolution clip = resolve("hf_max_grad_norm", {}, "{}", number);
  EXPECT_EQ(*clip.value, json::Value(1.0));
  AutoResolution off = resolve("reduced_precision_off", {});
  EXPECT_EQ(*off.value, json::Value(false));
}

TEST(AutoRules, ResolverOwnsItsInputs) {
  AutoResolver resolver;
  {
    ResolveContext ctx;
    ctx.hidden_size = 16;
    json::Value config = *json::parse(R"({"train_steps": 9})", "c");
    resolver = make_auto_resolver(ctx, config);
  }
  EXPECT_EQ(resolver("hidden_squared", int_field(1), "x").value->as_int(), 256);
  EXPECT_EQ(resolver("train_steps", int_field(1), "x").value->as_int(), 9);
}

// "aio_measured": the aio keys take what `dscore io-bench` cached for the
// device of the run's nvme_path.
MeasuredAio measured_for(const std::string& path) {
  MeasuredAio m;
  m.block_size = 4 << 20;
  m.queue_depth = 32;
  m.intra_op_parallelism = 2;
  m.single_submit = true;
  m.overlap_events = false;
  m.read_gbps = 2.5;
  m.write_gbps = 2;
  m.path = path;
  m.measured_at = "2026-11-24T05:00:00Z";
  return m;
}

std::string nvme_config(const std::string& section, const std::string& path) {
  return R"({"zero_optimization": {")" + section + R"(": {"device": "nvme", "nvme_path": ")" +
         path + R"("}}})";
}

FieldSpec block_size_field() { return F("block_size", FieldType::kInt, "").def_int(1048576); }

TEST(AutoRules, AioMeasuredTakesTheCachedValuesForTheDeviceOfNvmePath) {
  testing::TempCacheHome home;
  const std::string disk = home.disk().string();
  const std::string file = *write_aio_cache(*device_of(disk), measured_for(disk));
  // A folder the run will create, on the same device; the parameters' path counts too.
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    json::Value config = *json::parse(nvme_config(section, disk + "/job"), "c");
    AutoResolver resolver = make_auto_resolver({}, config);
    AutoResolution bs = resolver("aio_measured", block_size_field(), "aio.block_size");
    ASSERT_TRUE(bs.value) << bs.explanation;
    EXPECT_EQ(bs.value->as_int(), 4 << 20);
    EXPECT_NE(bs.explanation.find("dscore io-bench " + disk), std::string::npos) << bs.explanation;
    EXPECT_NE(bs.explanation.find(file), std::string::npos) << bs.explanation;
    AutoResolution qd =
        resolver("aio_measured", F("queue_depth", FieldType::kInt, "").def(8), "aio.queue_depth");
    EXPECT_EQ(qd.value->as_int(), 32);
    EXPECT_EQ(qd.explanation, "measured with aio.block_size");  // said in full once
    EXPECT_EQ(
        *resolver("aio_measured", F("single_submit", FieldType::kBool, "").def(false), "s").value,
        json::Value(true));
  }
}

TEST(AutoRules, AioMeasuredWithoutAMeasurementIsTheDefaultAndSaysHowToMeasure) {
  testing::TempCacheHome home;
  const std::string disk = home.disk().string();
  json::Value config = *json::parse(nvme_config("offload_optimizer", disk), "c");
  AutoResolution r = make_auto_resolver({}, config)("aio_measured", block_size_field(), "a");
  EXPECT_EQ(r.value->as_int(), 1048576);
  EXPECT_NE(r.explanation.find("run `dscore io-bench " + disk + "`"), std::string::npos)
      << r.explanation;
  // No nvme_path at all: nothing to measure, nothing to suggest.
  AutoResolution none = resolve("aio_measured", {}, "{}", block_size_field());
  EXPECT_EQ(none.value->as_int(), 1048576);
  EXPECT_EQ(none.explanation, "no nvme_path to measure: the default");
}

TEST(AutoRules, AioMeasuredIgnoresACorruptCacheAndNamesIt) {
  testing::TempCacheHome home;
  const std::string disk = home.disk().string();
  const std::string file = *write_aio_cache(*device_of(disk), measured_for(disk));
  std::ofstream(file) << "{\"version\": 1, \"aio\": ";
  json::Value config = *json::parse(nvme_config("offload_optimizer", disk), "c");
  AutoResolution r = make_auto_resolver({}, config)("aio_measured", block_size_field(), "a");
  EXPECT_EQ(r.value->as_int(), 1048576);
  EXPECT_NE(r.explanation.find("warning: corrupt aio cache " + file), std::string::npos)
      << r.explanation;
}

TEST(AutoRules, AioAutoInAConfigResolvesThroughTheCache) {
  testing::TempCacheHome home;
  const std::string disk = home.disk().string();
  ASSERT_TRUE(write_aio_cache(*device_of(disk), measured_for(disk)).ok());
  const std::string text =
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": )"
      R"({"device": "nvme", "nvme_path": ")" +
      disk +
      R"("}}, "aio": {"block_size": "auto", "queue_depth": "auto", "intra_op_parallelism": "auto",)"
      R"( "single_submit": "auto", "overlap_events": "auto"}})";
  LoadedConfig loaded = load_config_text(text, "ds_config.json", {});
  ASSERT_TRUE(loaded.ok()) << loaded.errors[0].message;
  const json::Value& aio = *loaded.resolved.find("aio");
  EXPECT_EQ(aio.find("block_size")->as_int(), 4 << 20);
  EXPECT_EQ(aio.find("queue_depth")->as_int(), 32);
  EXPECT_EQ(aio.find("intra_op_parallelism")->as_int(), 2);
  EXPECT_EQ(*aio.find("single_submit"), json::Value(true));
  EXPECT_EQ(*aio.find("overlap_events"), json::Value(false));
  int aio_notices = 0;
  for (const ConfigNotice& n : loaded.notices)
    if (n.path.rfind("aio.", 0) == 0) ++aio_notices;
  EXPECT_EQ(aio_notices, 5);
  // Without "auto" the written values stand, cache or not.
  LoadedConfig fixed = load_config_text(R"({"train_batch_size": 8, "aio": {"block_size": 131072}})",
                                        "ds_config.json", {});
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed.resolved.find("aio")->find("block_size")->as_int(), 131072);
}

}  // namespace
}  // namespace dscore::config
