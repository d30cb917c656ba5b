// Tests for core/config/params_schema.cc: a plugin's params_schema text (the
// format of dscore_plugin_descriptor::params_schema in sdk/include/dscore/plugin.h)
// becomes an ObjectSpec, and malformed schemas are rejected with a message
// naming the parameter and attribute.
#include <gtest/gtest.h>

#include "core/config/auto_rules.h"
#include "core/config/schema.h"

namespace dscore::config {
namespace {

const char* kAdamSchema = R"({
  "lr": {"type": "number", "default": 0.001, "min": 0, "auto": "optimizer_lr", "doc": "learning rate"},
  "betas": {"type": "number_array", "default": [0.9, 0.999], "length": 2, "min": 0, "max": 1},
  "eps": {"type": "number", "default": 1e-8},
  "weight_decay": {"type": "number_or_array", "default": 0},
  "adam_w_mode": {"type": "bool", "default": true},
  "steps": {"type": "int", "default": 1e3},
  "mode": {"type": "string", "enum": ["log", "linear"], "default": "log"},
  "total_num_steps": {"type": "int", "required": true, "auto": "train_steps"},
  "extra": {"type": "json"},
  "max_grad_norm": {"type": "number", "error": "use gradient_clipping"}
})";

TEST(ParamsSchema, ParsesEveryAttribute) {
  auto spec = parse_params_schema(kAdamSchema);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->fields.size(), 10u);
  const FieldSpec& lr = *spec->find("lr");
  EXPECT_EQ(lr.type, FieldType::kNumber);
  EXPECT_EQ(*lr.default_value, json::Value(0.001));
  EXPECT_EQ(*lr.min, 0);
  EXPECT_EQ(lr.auto_rule, "optimizer_lr");
  EXPECT_EQ(lr.doc, "learning rate");
  EXPECT_EQ(*spec->find("betas")->length, 2u);
  EXPECT_EQ(*spec->find("betas")->max, 1);
  EXPECT_EQ(spec->find("weight_decay")->type, FieldType::kNumberOrArray);
  EXPECT_EQ(spec->find("adam_w_mode")->type, FieldType::kBool);
  // An int default written as 1e3 is stored as an int.
  EXPECT_TRUE(spec->find("steps")->default_value->is_int());
  EXPECT_EQ(spec->find("mode")->enum_values, (std::vector<std::string>{"log", "linear"}));
  EXPECT_TRUE(spec->find("total_num_steps")->required);
  EXPECT_EQ(spec->find("extra")->type, FieldType::kJson);
  EXPECT_EQ(spec->find("max_grad_norm")->error, "use gradient_clipping");
  EXPECT_FALSE(spec->allow_unknown);
}

TEST(ParamsSchema, ValidatesParamsThroughTheSameValidator) {
  auto spec = parse_params_schema(kAdamSchema);
  ASSERT_TRUE(spec.ok());
  auto params = json::parse(
      R"({"lr": "auto", "betaz": [0.9, 0.99], "total_num_steps": "auto", "max_grad_norm": 1})",
      "t.json");
  ASSERT_TRUE(params.ok());
  json::Value config = *json::parse(R"({"optimizer": {"params": {"lr": 0.0003}}})", "c");
  ResolveContext context;
  context.train_steps = 500;
  std::vector<ConfigError> errors;
  std::vector<ConfigNotice> notices;
  json::Value out =
      validate_object(*params, *spec, "scheduler.params", make_auto_resolver(context, config),
                      ValidationSink{&errors, &notices});
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].path, "scheduler.params.betaz");
  EXPECT_EQ(errors[0].message, "unknown key \"betaz\"; did you mean \"betas\"?");
  EXPECT_EQ(errors[1].path, "scheduler.params.max_grad_norm");
  EXPECT_EQ(errors[1].message, "use gradient_clipping");
  EXPECT_EQ(out.find("lr")->as_number(), 0.0003);
  EXPECT_EQ(out.find("total_num_steps")->as_int(), 500);
  EXPECT_EQ(out.find("mode")->as_string(), "log");
  EXPECT_EQ(out.find("extra"), nullptr);  // optional without default: not passed
}

TEST(ParamsSchema, StringDefaultAutoIsLiteral) {
  auto spec = parse_params_schema(R"({"backend": {"type": "string", "default": "auto"}})");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  std::vector<ConfigError> errors;
  json::Value out = validate_object(*json::parse(R"({"backend": "auto"})", "t"), *spec, "comm",
                                    AutoResolver(), ValidationSink{&errors, nullptr});
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(out.find("backend")->as_string(), "auto");
}

TEST(ParamsSchema, EmptyObjectIsAValidSchema) {
  auto spec = parse_params_schema("{}");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->fields.empty());
}

struct BadSchema {
  const char* text;
  const char* message;
};

TEST(ParamsSchema, MalformedSchemasAreRejectedClearly) {
  const BadSchema cases[] = {
      {"{",
       "params_schema is not valid JSON: params_schema:1:2: Missing a name for object member."},
      {"[1]",
       "params_schema must be a JSON object mapping each parameter to its description, got array "
       "[1]"},
      {R"({"lr": 1})",
       "params_schema: parameter \"lr\": expected an object such as {\"type\": \"number\"}, got "
       "integer 1"},
      {R"({"lr": {"default": 1}})", "params_schema: parameter \"lr\": missing \"type\""},
      {R"({"lr": {"type": "numbr"}})",
       "params_schema: parameter \"lr\": unknown type \"numbr\" (one of bool, int, json, number, "
       "number_array, "
       "number_or_array, string, string_array); did you mean \"number\"?"},
      {R"({"lr": {"type": "number", "defualt": 1}})",
       "params_schema: parameter \"lr\": unknown schema attribute \"defualt\"; did you mean "
       "\"default\"?"},
      {R"({"lr": {"type": "number", "default": "x"}})",
       "params_schema: parameter \"lr\": default \"x\" is invalid: expected a number, got string "
       "\"x\""},
      {R"({"n": {"type": "int", "default": 2.5}})",
       "params_schema: parameter \"n\": default 2.5 is invalid: expected an int, got number 2.5"},
      {R"({"n": {"type": "int", "default": 0, "min": 1}})",
       "params_schema: parameter \"n\": default 0 is invalid: must be >= 1, got 0"},
      {R"({"m": {"type": "string", "enum": ["linear"], "default": "b"}})",
       "params_schema: parameter \"m\": default \"b\" is invalid: expected one of \"linear\", got "
       "\"b\""},
      {R"({"s": {"type": "string", "min": 1}})",
       "params_schema: parameter \"s\": \"min\" applies only to numeric types"},
      {R"({"n": {"type": "int", "enum": ["a"]}})",
       "params_schema: parameter \"n\": \"enum\" applies only to strings"},
      {R"({"n": {"type": "int", "length": 2}})",
       "params_schema: parameter \"n\": \"length\" applies only to arrays"},
      {R"({"n": {"type": "int", "min": 3, "max": 1}})",
       "params_schema: parameter \"n\": \"min\" is greater than \"max\""},
      {R"({"n": {"type": "int", "required": true, "default": 1}})",
       "params_schema: parameter \"n\": a required parameter cannot have a default"},
      {R"({"n": {"type": "int", "default": "auto"}})",
       "params_schema: parameter \"n\": default \"auto\" is invalid: expected an int, got string "
       "\"auto\""},
      {R"({"n": {"type": "int", "required": "yes"}})",
       "params_schema: parameter \"n\": \"required\" must be true or false"},
      {R"({"n": {"type": "int", "doc": 3}})",
       "params_schema: parameter \"n\": \"doc\" must be a string"},
  };
  for (const BadSchema& c : cases) {
    auto spec = parse_params_schema(c.text);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().message(), c.message) << c.text;
    EXPECT_EQ(spec.status().code(), DSCORE_INVALID_ARGUMENT);
  }
}

TEST(ParamsSchema, UnknownAutoRuleListsTheKnownOnes) {
  auto spec = parse_params_schema(R"({"n": {"type": "int", "auto": "hiden_squared"}})");
  ASSERT_FALSE(spec.ok());
  const std::string& m = spec.status().message();
  EXPECT_NE(m.find("unknown auto rule \"hiden_squared\""), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean \"hidden_squared\"?"), std::string::npos) << m;
  for (const AutoRuleInfo& r : auto_rules()) EXPECT_NE(m.find(r.name), std::string::npos) << r.name;
}

}  // namespace
}  // namespace dscore::config
