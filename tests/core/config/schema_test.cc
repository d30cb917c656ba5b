// Tests for core/config/schema.cc, the generic validator: unknown keys,
// types, bounds, enums, arrays, "auto", aliases, deprecations, "error"
// fields, nulls, defaults, ints from integral floats, paths and locations.
#include "core/config/schema.h"

#include <gtest/gtest.h>

#include "core/config/schema_builder.h"

namespace dscore::config {
namespace {

using T = FieldType;

struct Outcome {
  json::Value out;
  std::vector<ConfigError> errors;
  std::vector<ConfigNotice> notices;
  std::vector<std::string> resolver_calls;

  std::string error_text(size_t i = 0) const {
    if (i >= errors.size()) return "<no error>";
    const ConfigError& e = errors[i];
    return e.path + "@" + std::to_string(e.location.line) + ":" +
           std::to_string(e.location.column) + ": " + e.message;
  }
};

json::Value parse(std::string_view text) {
  auto r = json::parse(text, "t.json");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : json::Value();
}

Outcome validate(std::string_view text, const ObjectSpec& spec, AutoResolver resolver = {}) {
  Outcome run;
  AutoResolver recording = [&](const std::string& rule, const FieldSpec& f,
                               const std::string& path) {
    run.resolver_calls.push_back(rule + " " + path);
    return resolver(rule, f, path);
  };
  run.out = validate_object(parse(text), spec, "", resolver ? recording : AutoResolver(),
                            ValidationSink{&run.errors, &run.notices});
  return run;
}

ObjectSpec spec(std::vector<FieldSpec> fields, ObjectOptions options = {}) {
  return *make_object(std::move(fields), "test", options);
}

TEST(SchemaValidator, UnknownKeyIsAnErrorWithSuggestionAndKeyLocation) {
  ObjectSpec s = spec({F("zero_optimization", T::kObject, "").object(make_object({}, "zero"))});
  Outcome r = validate("{\n  \"zero_optimisation\": {}\n}", s);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.error_text(),
            "zero_optimisation@2:3: unknown key \"zero_optimisation\"; did you mean "
            "\"zero_optimization\"?");
  // Nothing plausible: no suggestion.
  Outcome far = validate("{\"banana\": 1}", s);
  EXPECT_EQ(far.error_text(), "banana@1:2: unknown key \"banana\"");
}

TEST(SchemaValidator, UnknownKeyNestedCarriesThePath) {
  auto inner = make_object({F("stage", T::kInt, "").def(0)}, "zero");
  ObjectSpec s = spec({F("zero", T::kObject, "").object(inner)});
  Outcome r = validate("{\"zero\": {\"stag\": 1}}", s);
  EXPECT_EQ(r.error_text(), "zero.stag@1:11: unknown key \"stag\"; did you mean \"stage\"?");
  EXPECT_EQ(r.out.find("zero")->find("stage")->as_int(), 0);  // still filled
}

TEST(SchemaValidator, AllowUnknownKeepsKeysWithANoticeUnlessQuiet) {
  ObjectSpec loud = spec({F("a", T::kInt, "")}, {.allow_unknown = true});
  Outcome r = validate("{\"x\": [1], \"a\": 1}", loud);
  EXPECT_TRUE(r.errors.empty());
  ASSERT_EQ(r.notices.size(), 1u);
  EXPECT_EQ(r.notices[0].path, "x");
  EXPECT_EQ(r.notices[0].message, "accepted but not used by dscore");
  EXPECT_EQ(r.out.find("x")->items().size(), 1u);

  ObjectSpec quiet = spec({}, {.allow_unknown = true, .quiet_unknown = true});
  Outcome q = validate("{\"x\": \"auto\"}", quiet);
  EXPECT_TRUE(q.errors.empty());
  EXPECT_TRUE(q.notices.empty());
  EXPECT_TRUE(q.out.find("x")->is_auto());  // kept as written, not resolved
  EXPECT_EQ(q.out.find("x")->location.column, 7);
}

TEST(SchemaValidator, WrongTypeNamesExpectedAndGot) {
  ObjectSpec s =
      spec({F("n", T::kInt, ""), F("b", T::kBool, ""), F("s", T::kString, ""),
            F("o", T::kObject, "").object(make_object({}, "o")), F("x", T::kNumber, "")});
  Outcome r = validate("{\"n\": \"5e8\", \"b\": 1, \"s\": 3, \"o\": [], \"x\": true}", s);
  ASSERT_EQ(r.errors.size(), 5u);
  EXPECT_EQ(r.error_text(0), "n@1:7: expected an int, got string \"5e8\"");
  EXPECT_EQ(r.error_text(1), "b@1:19: expected a bool (true or false), got integer 1");
  EXPECT_EQ(r.error_text(2), "s@1:27: expected a string, got integer 3");
  EXPECT_EQ(r.error_text(3), "o@1:35: expected an object, got array []");
  EXPECT_EQ(r.error_text(4), "x@1:44: expected a number, got bool true");
}

TEST(SchemaValidator, IntsAcceptIntegralFloatsOnly) {
  ObjectSpec s = spec({F("a", T::kInt, ""), F("b", T::kInt, ""), F("c", T::kInt, "")});
  Outcome r = validate("{\"a\": 5e8, \"b\": 2.5, \"c\": 1e30}", s);
  EXPECT_TRUE(r.out.find("a")->is_int());
  EXPECT_EQ(r.out.find("a")->as_int(), 500000000);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.error_text(0), "b@1:17: expected an int, got number 2.5");
  EXPECT_EQ(r.error_text(1), "c@1:27: expected an int, got number 1e+30");
  EXPECT_EQ(r.out.find("b"), nullptr);
}

TEST(SchemaValidator, Bounds) {
  ObjectSpec s = spec({F("stage", T::kInt, "").range(0, 3), F("lo", T::kNumber, "").min(0),
                       F("hi", T::kNumber, "").max(1), F("ok", T::kInt, "").range(0, 3)});
  Outcome r = validate("{\"stage\": 4, \"lo\": -0.5, \"hi\": 1.5, \"ok\": 3}", s);
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.error_text(0), "stage@1:11: must be between 0 and 3, got 4");
  EXPECT_EQ(r.error_text(1), "lo@1:20: must be >= 0, got -0.5");
  EXPECT_EQ(r.error_text(2), "hi@1:32: must be <= 1, got 1.5");
  EXPECT_EQ(r.out.find("ok")->as_int(), 3);
}

TEST(SchemaValidator, EnumsExactCaseInsensitiveAndCustomMessage) {
  ObjectSpec s = spec({
      F("device", T::kString, "").enums({"none", "cpu", "nvme"}),
      F("tag", T::kString, "").enums({"WARN", "IGNORE", "FAIL"}, true),
      F("dtype", T::kString, "").enums({"fp16", "bf16"}, true).enum_message("Bad dtype. Got: {}"),
  });
  Outcome ok = validate("{\"device\": \"cpu\", \"tag\": \"fail\", \"dtype\": \"BF16\"}", s);
  EXPECT_TRUE(ok.errors.empty());
  EXPECT_EQ(ok.out.find("tag")->as_string(), "FAIL");  // stored as listed
  EXPECT_EQ(ok.out.find("dtype")->as_string(), "bf16");

  Outcome bad = validate("{\"device\": \"CPU\", \"tag\": \"foo\", \"dtype\": \"fp8\"}", s);
  ASSERT_EQ(bad.errors.size(), 3u);
  EXPECT_EQ(bad.error_text(0),
            "device@1:12: expected one of \"none\", \"cpu\", \"nvme\", got \"CPU\"; did you mean "
            "\"cpu\"?");
  EXPECT_EQ(bad.error_text(1),
            "tag@1:26: expected one of \"WARN\", \"IGNORE\", \"FAIL\", got \"foo\"");
  EXPECT_EQ(bad.error_text(2), "dtype@1:42: Bad dtype. Got: fp8");
}

TEST(SchemaValidator, ArraysCheckItemsLengthAndBounds) {
  ObjectSpec s = spec({
      F("betas", T::kNumberArray, "").length(2).range(0, 1),
      F("lr", T::kNumberOrArray, "").min(0),
      F("names", T::kStringArray, ""),
  });
  Outcome ok = validate("{\"betas\": [0.9, 0.999], \"lr\": [0.1, 0.2], \"names\": [\"a\"]}", s);
  EXPECT_TRUE(ok.errors.empty()) << ok.error_text();
  Outcome scalar = validate("{\"lr\": 0.1}", s);
  EXPECT_TRUE(scalar.errors.empty());

  Outcome bad = validate("{\"betas\": [0.9, \"x\", 2], \"lr\": -1, \"names\": [1]}", s);
  ASSERT_EQ(bad.errors.size(), 5u);
  EXPECT_EQ(bad.error_text(0), "betas@1:11: expected 2 numbers, got 3");
  EXPECT_EQ(bad.error_text(1), "betas[1]@1:17: expected a number, got string \"x\"");
  EXPECT_EQ(bad.error_text(2), "betas[2]@1:22: must be between 0 and 1, got 2");
  EXPECT_EQ(bad.error_text(3), "lr@1:32: must be >= 0, got -1");
  EXPECT_EQ(bad.error_text(4), "names[0]@1:46: expected a string, got integer 1");
}

TEST(SchemaValidator, AutoWithoutRuleIsRejectedWithTheNote) {
  ObjectSpec s =
      spec({F("a", T::kInt, ""),
            F("stage", T::kInt, "")
                .auto_note("DeepSpeed would silently drop it and run ZeRO stage 0; give 0-3")});
  Outcome r = validate("{\"a\": \"auto\", \"stage\": \"auto\"}", s);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.error_text(0), "a@1:7: \"auto\" is not accepted here; give an int");
  EXPECT_EQ(r.error_text(1),
            "stage@1:24: \"auto\" is not accepted here; DeepSpeed would silently drop it and run "
            "ZeRO stage 0; give 0-3");
}

TEST(SchemaValidator, AutoWithRuleCallsTheResolverAndNotes) {
  auto inner = make_object({F("bucket", T::kInt, "").min(0).auto_rule("hidden_squared")}, "z");
  ObjectSpec s = spec({F("z", T::kObject, "").object(inner)});
  AutoResolver resolver = [](const std::string&, const FieldSpec&, const std::string&) {
    return AutoResolution{json::Value(int64_t{65536}), "hidden_size^2 = 256^2", ""};
  };
  Outcome r = validate("{\"z\": {\"bucket\": \"auto\"}}", s, resolver);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.resolver_calls, std::vector<std::string>{"hidden_squared z.bucket"});
  EXPECT_EQ(r.out.find("z")->find("bucket")->as_int(), 65536);
  EXPECT_EQ(r.out.find("z")->find("bucket")->location.column, 18);  // the "auto" it replaced
  ASSERT_EQ(r.notices.size(), 1u);
  EXPECT_EQ(r.notices[0].path, "z.bucket");
  EXPECT_EQ(r.notices[0].message, "\"auto\" -> 65536 (hidden_size^2 = 256^2)");
}

TEST(SchemaValidator, AutoResolverErrorsAndAbsentResults) {
  ObjectSpec s =
      spec({F("steps", T::kInt, "").auto_rule("train_steps"),
            F("b", T::kInt, "").auto_rule("batch"), F("c", T::kInt, "").min(10).auto_rule("x")});
  AutoResolver resolver = [](const std::string& rule, const FieldSpec&, const std::string&) {
    if (rule == "train_steps")
      return AutoResolution{std::nullopt, "", "set \"train_steps\" or pass --steps"};
    if (rule == "x") return AutoResolution{json::Value(1), "one", ""};
    return AutoResolution{};
  };
  Outcome r = validate("{\"steps\": \"auto\", \"b\": \"auto\", \"c\": \"auto\"}", s, resolver);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.error_text(0),
            "steps@1:11: \"auto\" cannot be resolved: set \"train_steps\" or pass --steps");
  // A resolved value still goes through the field's checks.
  EXPECT_EQ(r.error_text(1), "c@1:37: must be >= 10, got 1");
  EXPECT_EQ(r.out.find("b"), nullptr);  // left for the batch rule
  EXPECT_TRUE(r.notices.empty());
}

TEST(SchemaValidator, JsonFieldsKeepAutoAsWritten) {
  ObjectSpec s = spec({F("stages", T::kJson, "").def("auto")});
  Outcome r = validate("{\"stages\": \"auto\"}", s);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.out.find("stages")->is_auto());
}

TEST(SchemaValidator, AliasesCanonicaliseAndTwoSpellingsAreAnError) {
  ObjectSpec s =
      spec({F("prefetch_bucket_size", T::kInt, "").alias("stage3_prefetch_bucket_size").def(5)});
  Outcome r = validate("{\"stage3_prefetch_bucket_size\": 7}", s);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.out.find("prefetch_bucket_size")->as_int(), 7);
  EXPECT_EQ(r.out.find("stage3_prefetch_bucket_size"), nullptr);

  Outcome both = validate("{\"prefetch_bucket_size\": 1,\n \"stage3_prefetch_bucket_size\": 2}", s);
  ASSERT_EQ(both.errors.size(), 1u);
  EXPECT_EQ(both.error_text(),
            "stage3_prefetch_bucket_size@2:2: \"prefetch_bucket_size\" and "
            "\"stage3_prefetch_bucket_size\" are two "
            "spellings of the same key; give only one");
}

TEST(SchemaValidator, ErrorFieldsRejectWithTheirMessage) {
  ObjectSpec s = spec({F("max_grad_norm", T::kNumber, "").error("use gradient_clipping")});
  Outcome r = validate("{\"max_grad_norm\": 1.0}", s);
  EXPECT_EQ(r.error_text(), "max_grad_norm@1:2: use gradient_clipping");
  EXPECT_TRUE(validate("{}", s).errors.empty());
}

TEST(SchemaValidator, DeprecatedKeysNoticeRenameAndTogetherError) {
  ObjectSpec s = spec({
      F("intra_op_parallelism", T::kInt, "").def(1).min(1),
      F("thread_count", T::kInt, "")
          .replaced_by("intra_op_parallelism", true)
          .deprecated("renamed"),
      F("offload", T::kObject, "").nullable().object(make_object({}, "o")),
      F("cpu_offload", T::kBool, "").replaced_by("offload", false).deprecated("use offload"),
  });
  Outcome renamed = validate("{\"thread_count\": 4}", s);
  EXPECT_TRUE(renamed.errors.empty());
  EXPECT_EQ(renamed.out.find("intra_op_parallelism")->as_int(), 4);
  EXPECT_EQ(renamed.out.find("thread_count"), nullptr);
  ASSERT_EQ(renamed.notices.size(), 1u);
  EXPECT_EQ(renamed.notices[0].path, "thread_count");
  EXPECT_EQ(renamed.notices[0].message, "renamed");
  // The renamed key is checked against its replacement's bounds.
  EXPECT_EQ(validate("{\"thread_count\": 0}", s).error_text(),
            "thread_count@1:18: must be >= 1, got 0");

  Outcome kept = validate("{\"cpu_offload\": true}", s);
  EXPECT_TRUE(kept.errors.empty());
  EXPECT_TRUE(kept.out.find("cpu_offload")->as_bool());  // for a rule to map

  Outcome both = validate("{\"cpu_offload\": true, \"offload\": {}}", s);
  EXPECT_EQ(both.error_text(),
            "cpu_offload@1:2: Cannot provide deprecated parameter 'cpu_offload' and replacing "
            "parameter 'offload' "
            "together");
  Outcome both_renamed = validate("{\"thread_count\": 2, \"intra_op_parallelism\": 3}", s);
  EXPECT_EQ(both_renamed.errors.size(), 1u);
  EXPECT_EQ(both_renamed.out.find("intra_op_parallelism")->as_int(), 3);
}

TEST(SchemaValidator, NullableNullIsAbsentOtherNullIsAnError) {
  ObjectSpec s = spec({F("a", T::kInt, "").nullable().def(3), F("b", T::kInt, "")});
  Outcome r = validate("{\"a\": null, \"b\": null}", s);
  EXPECT_EQ(r.out.find("a"), nullptr);
  EXPECT_EQ(r.error_text(), "b@1:18: expected an int, got null");
}

TEST(SchemaValidator, DefaultsAreFilledIncludingNestedObjects) {
  auto inner = make_object({F("x", T::kInt, "").def(7), F("y", T::kString, "")}, "inner");
  ObjectSpec s = spec({F("a", T::kBool, "").def(false),
                       F("inner", T::kObject, "").def(json::Value::object()).object(inner),
                       F("absent", T::kObject, "").nullable().object(inner)});
  Outcome r = validate("{}", s);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(json::serialize(r.out), "{\"a\":false,\"inner\":{\"x\":7}}");
  Outcome given = validate("{\"absent\": {}}", s);
  EXPECT_EQ(json::serialize(*given.out.find("absent")), "{\"x\":7}");
}

TEST(SchemaValidator, OutputFollowsSchemaOrderAndKeepsLocations) {
  ObjectSpec s = spec({F("a", T::kInt, ""), F("b", T::kInt, "")});
  Outcome r = validate("{\"b\": 2,\n \"a\": 1}", s);
  EXPECT_EQ(r.out.members()[0].key, "a");
  EXPECT_EQ(r.out.members()[0].key_location.line, 2);
  EXPECT_EQ(r.out.members()[1].value.location.column, 7);
}

TEST(SchemaValidator, RequiredKeyMissingPointsAtTheObject) {
  auto inner = make_object({F("type", T::kString, "").required()}, "opt");
  ObjectSpec s = spec({F("optimizer", T::kObject, "").object(inner)});
  Outcome r = validate("{\"optimizer\": {\"params\": {}}}", s);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.error_text(0), "optimizer.params@1:16: unknown key \"params\"");
  EXPECT_EQ(r.error_text(1), "optimizer.type@1:15: missing required key \"type\"");
}

TEST(SchemaValidator, ObjectArraysValidateEachItem) {
  auto item = make_object({F("type", T::kString, "").required()}, "monitor");
  ObjectSpec s = spec({F("monitors", T::kObjectArray, "").object(item)});
  Outcome r = validate("{\"monitors\": [{\"type\": \"csv\"}, {\"typo\": 1}, 3]}", s);
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.error_text(0), "monitors[1].typo@1:33: unknown key \"typo\"; did you mean \"type\"?");
  EXPECT_EQ(r.error_text(1), "monitors[1].type@1:32: missing required key \"type\"");
  EXPECT_EQ(r.error_text(2), "monitors[2]@1:45: expected an object, got integer 3");
}

TEST(SchemaValidator, TopLevelNotAnObject) {
  ObjectSpec s = spec({F("a", T::kInt, "").def(1)});
  std::vector<ConfigError> errors;
  json::Value out = validate_object(parse("[1]"), s, "sec", {}, ValidationSink{&errors, nullptr});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "sec");
  EXPECT_EQ(errors[0].message, "expected an object, got array [1]");
  EXPECT_EQ(out.find("a")->as_int(), 1);  // as complete as possible
  // null is an empty object.
  errors.clear();
  validate_object(json::Value(), s, "sec", {}, ValidationSink{&errors, nullptr});
  EXPECT_TRUE(errors.empty());
}

TEST(SchemaValidator, NotUsedKeysGetANotice) {
  ObjectSpec s = spec({F("pipeline", T::kObject, "").not_used().object(make_object({}, "p"))});
  Outcome r = validate("{\"pipeline\": {}}", s);
  ASSERT_EQ(r.notices.size(), 1u);
  EXPECT_EQ(r.notices[0].message, "accepted but not used by dscore");
}

TEST(SchemaPaths, JoinPath) {
  EXPECT_EQ(join_path("", "a"), "a");
  EXPECT_EQ(join_path("a", "b"), "a.b");
  EXPECT_EQ(join_path("a", "[2]"), "a[2]");
  EXPECT_EQ(join_path("a[2]", "c"), "a[2].c");
}

}  // namespace
}  // namespace dscore::config
