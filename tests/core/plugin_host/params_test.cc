// A plugin's params object (core/plugin_host/params.cc): validated against
// the plugin's own schema with the config validator (paths like
// "optimizer.params.lrr", did-you-mean, types, defaults, "auto"), then
// turned into the typed views create() receives.
#include "core/plugin_host/params.h"

#include <gtest/gtest.h>

namespace dscore::plugin_host {
namespace {

// The fake SGD optimizer's schema (tests/fakes/plugins/fake_optimizer.cc).
const char kSchema[] = R"({
  "lr": {"type": "number", "default": 0.01, "min": 0, "auto": "optimizer_lr"},
  "momentum": {"type": "number", "default": 0, "min": 0, "max": 1},
  "nesterov": {"type": "bool", "default": false},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999]},
  "steps": {"type": "int"},
  "mode": {"type": "string", "enum": ["fast", "exact"], "default": "exact"},
  "per_group": {"type": "number_or_array"},
  "extra": {"type": "json"},
  "legacy": {"type": "bool", "error": "'legacy' was removed in 2.0; drop it"}
})";

PluginInfo plugin(const std::string& schema = kSchema) {
  PluginInfo info;
  info.kind = DSCORE_KIND_OPTIMIZER;
  info.name = "sgd";
  info.params_schema = schema;
  info.library_path = "/p/libsgd.so";
  return info;
}

struct Outcome {
  ValidatedParams params;
  std::vector<config::ConfigError> errors;
  std::vector<config::ConfigNotice> notices;
  const dscore_named_value* get(const std::string& name) const {
    for (size_t i = 0; i < params.size(); ++i)
      if (name == params.data()[i]->name) return params.data()[i];
    return nullptr;
  }
};

Outcome validate(const std::string& text, const PluginInfo& info = plugin(),
                 config::AutoResolver resolver = config::AutoResolver()) {
  Outcome out;
  auto parsed = json::parse(text, "ds_config.json");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  out.params =
      validate_params(info, *parsed, "optimizer.params", resolver, &out.errors, &out.notices);
  return out;
}

TEST(PluginParams, UnknownKeyHasItsPathLocationAndASuggestion) {
  Outcome o = validate("{\n  \"lrr\": 0.1\n}");
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_EQ(o.errors[0].path, "optimizer.params.lrr");
  EXPECT_EQ(o.errors[0].location.line, 2);
  EXPECT_NE(o.errors[0].message.find("did you mean \"lr\""), std::string::npos)
      << o.errors[0].message;
}

TEST(PluginParams, WrongTypesAndBoundsAreErrors) {
  Outcome o = validate(R"({"lr": "fast", "momentum": 2, "betas": [0.9], "mode": "slow"})");
  std::vector<std::string> paths;
  for (const auto& e : o.errors) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"optimizer.params.lr", "optimizer.params.momentum",
                                             "optimizer.params.betas", "optimizer.params.mode"}));
}

TEST(PluginParams, KeyTheSchemaRejectsGivesTheSchemasMessage) {
  Outcome o = validate(R"({"legacy": true})");
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_EQ(o.errors[0].path, "optimizer.params.legacy");
  EXPECT_EQ(o.errors[0].message, "'legacy' was removed in 2.0; drop it");
}

TEST(PluginParams, DefaultsAreFilledWithTheirDeclaredTypes) {
  Outcome o = validate("{}");
  ASSERT_TRUE(o.errors.empty());
  ASSERT_EQ(o.params.size(), 5u);  // lr, momentum, nesterov, betas, mode; the rest have no default
  const dscore_named_value* lr = o.get("lr");
  ASSERT_TRUE(lr);
  EXPECT_EQ(lr->struct_size, sizeof(dscore_named_value));
  EXPECT_EQ(lr->type, DSCORE_VALUE_DOUBLE);
  EXPECT_DOUBLE_EQ(lr->d, 0.01);
  EXPECT_EQ(o.get("momentum")->type, DSCORE_VALUE_DOUBLE);  // "number" even though written 0
  EXPECT_EQ(o.get("nesterov")->type, DSCORE_VALUE_BOOL);
  EXPECT_EQ(o.get("nesterov")->b, 0);
  const dscore_named_value* betas = o.get("betas");
  ASSERT_EQ(betas->type, DSCORE_VALUE_DOUBLE_ARRAY);
  ASSERT_EQ(betas->count, 2u);
  EXPECT_DOUBLE_EQ(betas->doubles[1], 0.999);
  EXPECT_STREQ(o.get("mode")->s, "exact");
  EXPECT_EQ(o.get("steps"), nullptr);
  EXPECT_EQ(o.params.raw_json(), "{}");
}

TEST(PluginParams, ValuesTakeTheSchemasTypeNotTheSpelling) {
  Outcome o = validate(R"({"lr": 1, "steps": 5e3, "per_group": 0.5, "extra": {"a": [1, "x"]}})");
  ASSERT_TRUE(o.errors.empty()) << o.errors[0].message;
  EXPECT_EQ(o.get("lr")->type, DSCORE_VALUE_DOUBLE);
  EXPECT_DOUBLE_EQ(o.get("lr")->d, 1.0);
  EXPECT_EQ(o.get("steps")->type, DSCORE_VALUE_INT);
  EXPECT_EQ(o.get("steps")->i, 5000);
  EXPECT_EQ(o.get("per_group")->type, DSCORE_VALUE_DOUBLE);
  EXPECT_EQ(o.get("extra")->type, DSCORE_VALUE_JSON);
  EXPECT_STREQ(o.get("extra")->s, R"({"a":[1,"x"]})");
  // The raw text is the object as written: no defaults, no conversions.
  auto raw = json::parse(o.params.raw_json(), "raw");
  ASSERT_TRUE(raw.ok()) << o.params.raw_json();
  EXPECT_EQ(
      *raw,
      *json::parse(R"({"lr": 1, "steps": 5e3, "per_group": 0.5, "extra": {"a": [1, "x"]}})", "x"));
  EXPECT_EQ(o.params.raw_json().find("nesterov"), std::string::npos);
}

TEST(PluginParams, NumberOrArrayAcceptsAListPerGroup) {
  Outcome o = validate(R"({"per_group": [0.1, 0.2, 0.3]})");
  ASSERT_TRUE(o.errors.empty());
  const dscore_named_value* v = o.get("per_group");
  ASSERT_EQ(v->type, DSCORE_VALUE_DOUBLE_ARRAY);
  EXPECT_EQ(std::vector<double>(v->doubles, v->doubles + v->count),
            (std::vector<double>{0.1, 0.2, 0.3}));
}

TEST(PluginParams, AutoIsResolvedByTheHostRuleAndReported) {
  config::AutoResolver resolver = [](const std::string& rule, const config::FieldSpec&,
                                     const std::string&) {
    config::AutoResolution r;
    if (rule == "optimizer_lr") {
      r.value = json::Value(0.003);
      r.explanation = "from the test";
    } else {
      r.error = "unexpected rule " + rule;
    }
    return r;
  };
  Outcome o = validate(R"({"lr": "auto"})", plugin(), resolver);
  ASSERT_TRUE(o.errors.empty()) << o.errors[0].message;
  EXPECT_EQ(o.get("lr")->type, DSCORE_VALUE_DOUBLE);
  EXPECT_DOUBLE_EQ(o.get("lr")->d, 0.003);
  ASSERT_FALSE(o.notices.empty());
  EXPECT_EQ(o.notices[0].path, "optimizer.params.lr");
  EXPECT_EQ(o.params.raw_json(), R"({"lr":"auto"})");  // as written

  Outcome rejected = validate(R"({"momentum": "auto"})", plugin(), resolver);
  ASSERT_EQ(rejected.errors.size(), 1u);
  EXPECT_EQ(rejected.errors[0].path, "optimizer.params.momentum");
}

TEST(PluginParams, WithoutASchemaEveryKeyIsConvertedGenerically) {
  Outcome o = validate(
      R"({"a": 1, "b": [1, 2.5], "c": {"x": 1}, "d": [1, "x"], "e": "s", "f": true, "g": 1.5, "h": null})",
      plugin(""));
  ASSERT_TRUE(o.errors.empty());
  ASSERT_EQ(o.params.size(), 8u);
  EXPECT_EQ(o.get("a")->type, DSCORE_VALUE_INT);
  EXPECT_EQ(o.get("b")->type, DSCORE_VALUE_DOUBLE_ARRAY);
  EXPECT_EQ(o.get("c")->type, DSCORE_VALUE_JSON);
  EXPECT_STREQ(o.get("c")->s, R"({"x":1})");
  EXPECT_EQ(o.get("d")->type, DSCORE_VALUE_JSON);
  EXPECT_EQ(o.get("e")->type, DSCORE_VALUE_STRING);
  EXPECT_EQ(o.get("f")->type, DSCORE_VALUE_BOOL);
  EXPECT_EQ(o.get("g")->type, DSCORE_VALUE_DOUBLE);
  EXPECT_EQ(o.get("h")->type, DSCORE_VALUE_NULL);
  // Views name the keys in the order written.
  EXPECT_STREQ(o.params.data()[0]->name, "a");
  EXPECT_STREQ(o.params.data()[7]->name, "h");
}

TEST(PluginParams, ParamsThatAreNotAnObjectAreAnError) {
  Outcome o = validate("[1, 2]");
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_EQ(o.errors[0].path, "optimizer.params");
  EXPECT_NE(o.errors[0].message.find("must be an object"), std::string::npos);
  EXPECT_EQ(o.params.size(), 0u);
}

TEST(PluginParams, NullParamsMeanAnEmptyObject) {
  Outcome o = validate("null");
  EXPECT_TRUE(o.errors.empty());
  EXPECT_EQ(o.params.size(), 5u);
  EXPECT_EQ(o.params.raw_json(), "{}");
}

TEST(PluginParams, AnInvalidSchemaIsAnErrorNamingThePlugin) {
  Outcome o = validate("{}", plugin(R"({"lr": {"type": "float"}})"));
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_EQ(
      o.errors[0].message.rfind("optimizer 'sgd' (/p/libsgd.so) has an invalid params_schema", 0),
      0u)
      << o.errors[0].message;
}

TEST(PluginParams, ViewsStayValidWhenTheParamsAreMoved) {
  Outcome o = validate(R"({"mode": "fast", "betas": [0.5, 0.6]})");
  ValidatedParams moved = std::move(o.params);
  ValidatedParams again;
  again = std::move(moved);
  const dscore_named_value* mode = nullptr;
  const dscore_named_value* betas = nullptr;
  for (size_t i = 0; i < again.size(); ++i) {
    if (std::string(again.data()[i]->name) == "mode") mode = again.data()[i];
    if (std::string(again.data()[i]->name) == "betas") betas = again.data()[i];
  }
  ASSERT_TRUE(mode && betas);
  EXPECT_STREQ(mode->s, "fast");
  EXPECT_DOUBLE_EQ(betas->doubles[1], 0.6);
}

}  // namespace
}  // namespace dscore::plugin_host
