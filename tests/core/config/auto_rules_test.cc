// Tests for core/config/auto_rules.cc: each "auto" rule's value and
// explanation, the fallbacks when an input is unknown, and the error when
// train_steps cannot be resolved. HF Trainer conventions (hidden_size^2,
// int(0.9 * hidden_size^2), 10 * hidden_size, max_grad_norm 1.0) are exact.
#include "core/config/auto_rules.h"

#include <gtest/gtest.h>

#include "core/config/schema_builder.h"

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

}  // namespace
}  // namespace dscore::config
