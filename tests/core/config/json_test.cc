// Tests for core/config/json.cc: locations of values and keys, duplicate
// keys at any depth (DeepSpeed rejects them too: docs/deepspeed-reference.md#config-loading),
// comments and trailing commas, syntax-error positions, numbers, and the
// serializer's round trip.
#include "core/config/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace dscore::json {
namespace {

Value parse_ok(std::string_view text) {
  auto r = parse(text, "t.json");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : Value();
}

std::string parse_error(std::string_view text) {
  auto r = parse(text, "t.json");
  EXPECT_FALSE(r.ok());
  return r.status().message();
}

TEST(JsonParse, LocationsOfValuesAndKeys) {
  Value doc = parse_ok("{\n  \"a\": 1,\n  \"bb\": {\"c\": [true, null]},\n\t\"d\":\"x\"\n}");
  EXPECT_EQ(doc.location.line, 1);
  EXPECT_EQ(doc.location.column, 1);
  const Member* a = doc.find_member("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->key_location.line, 2);
  EXPECT_EQ(a->key_location.column, 3);  // the opening quote
  EXPECT_EQ(a->value.location.line, 2);
  EXPECT_EQ(a->value.location.column, 8);
  const Member* bb = doc.find_member("bb");
  EXPECT_EQ(bb->value.location.column, 9);
  const Value& c = *bb->value.find("c");
  EXPECT_EQ(c.location.line, 3);
  EXPECT_EQ(c.location.column, 15);
  EXPECT_EQ(c.items()[1].location.column, 22);
  const Member* d = doc.find_member("d");
  EXPECT_EQ(d->key_location.line, 4);
  EXPECT_EQ(d->key_location.column, 2);  // after a tab
  EXPECT_EQ(d->value.location.column, 6);
}

TEST(JsonParse, ColumnsCountCharactersNotBytes) {
  Value doc = parse_ok("{\"é\": 1, \"b\": 2}");
  EXPECT_EQ(doc.find_member("b")->key_location.column, 10);
}

TEST(JsonParse, CommentsAndTrailingCommasAreAccepted) {
  Value doc = parse_ok(
      "// ds_config\n{\n  /* batch */ \"train_batch_size\": 8, // eight\n  \"x\": [1, 2,],\n}\n");
  EXPECT_EQ(doc.find("train_batch_size")->as_int(), 8);
  EXPECT_EQ(doc.find_member("train_batch_size")->key_location.column, 15);
  EXPECT_EQ(doc.find("x")->items().size(), 2u);
}

TEST(JsonParse, DuplicateKeyAtTopLevel) {
  EXPECT_EQ(parse_error("{\n  \"train_batch_size\": 8,\n  \"train_batch_size\": 16\n}"),
            "t.json:3:3: duplicate key \"train_batch_size\" (first at 2:3)");
}

TEST(JsonParse, DuplicateKeyNested) {
  EXPECT_EQ(parse_error("{\"zero_optimization\": {\"stage\": 1,\n \"x\": {\"a\": 1, \"a\": 2}}}"),
            "t.json:2:16: duplicate key \"a\" (first at 2:8)");
  // The same key in sibling objects is fine.
  parse_ok("{\"a\": {\"k\": 1}, \"b\": {\"k\": 2}, \"c\": [{\"k\": 1}, {\"k\": 2}]}");
}

// A tokenizer.json vocabulary: one object of 200k members on one line. Key
// lookup and column counting stay linear (quadratic took minutes), and
// locations stay exact.
TEST(JsonParse, HugeOneLineObjectParsesInLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": 1";
  Value v = parse_ok(text + "}");
  ASSERT_EQ(v.members().size(), 200000u);
  EXPECT_EQ(v.members()[1].key_location.column, 11);  // {"k0": 1, "k1"
  EXPECT_EQ(v.members().back().key_location.column,
            static_cast<int>(text.rfind("\"k199999\"")) + 1);
  EXPECT_EQ(parse_error(text + ", \"k70\": 2}"),
            "t.json:1:" + std::to_string(text.size() + 3) + ": duplicate key \"k70\" (first at 1:" +
                std::to_string(text.find("\"k70\"") + 1) + ")");
}

TEST(JsonParse, SyntaxErrorsPointAtTheProblem) {
  EXPECT_EQ(parse_error("{\n  \"a\": 1\n  \"b\": 2\n}"),
            "t.json:3:3: Missing a comma or '}' after an object member.");
  EXPECT_EQ(parse_error("{\"a\": tru}"), "t.json:1:10: Invalid value.");  // where RapidJSON stops
  EXPECT_EQ(parse_error(""), "t.json:1:1: The document is empty.");
  EXPECT_EQ(parse_error("{\"a\": 1} x"),
            "t.json:1:10: The document root must not be followed by other values.");
  EXPECT_EQ(parse_error("{\"a\": \"abc"),
            "t.json:1:11: Missing a closing quotation mark in string.");
}

TEST(JsonParse, NanAndInfinityAreRejected) {
  parse_error("{\"a\": NaN}");
  parse_error("{\"a\": Infinity}");
}

TEST(JsonParse, NulByteIsAnError) {
  std::string text = std::string("{\"a\": 1}") + '\0' + "garbage";
  EXPECT_EQ(parse_error(text), "t.json:1:9: NUL byte in the text (is this a binary file?)");
}

TEST(JsonParse, DeepNestingIsAnErrorNotACrash) {
  std::string text(100000, '[');
  std::string message = parse_error(text);
  EXPECT_NE(message.find("nest deeper than 128 levels"), std::string::npos) << message;
  // The limit itself is fine.
  std::string ok = std::string(kMaxNestingDepth, '[') + std::string(kMaxNestingDepth, ']');
  parse_ok(ok);
}

TEST(JsonParse, IntegersThatFitInt64AreInts) {
  Value doc = parse_ok(
      "{\"a\": 5, \"b\": -9223372036854775808, \"c\": 9223372036854775807,"
      " \"d\": 9223372036854775808, \"e\": 5e8, \"f\": 2.5}");
  EXPECT_TRUE(doc.find("a")->is_int());
  EXPECT_EQ(doc.find("b")->as_int(), INT64_MIN);
  EXPECT_EQ(doc.find("c")->as_int(), INT64_MAX);
  EXPECT_EQ(doc.find("d")->type(), Type::kDouble);
  EXPECT_EQ(doc.find("e")->type(), Type::kDouble);
  EXPECT_TRUE(doc.find("e")->is_integral());
  EXPECT_EQ(doc.find("e")->as_int(), 500000000);
  EXPECT_FALSE(doc.find("f")->is_integral());
  EXPECT_THROW(doc.find("f")->as_int(), std::logic_error);
}

TEST(JsonParse, NumbersAreExactlyRoundedAndRangeChecked) {
  Value doc = parse_ok(
      "{\"a\": 0.30000000000000004, \"b\": 0e97, \"c\": 1e-400, \"d\": -1e-400,"
      " \"e\": 2.2250738585072014e-308, \"f\": 1.7976931348623157e308, \"g\": -0}");
  EXPECT_EQ(doc.find("a")->as_number(), 0.30000000000000004);
  EXPECT_EQ(doc.find("b")->as_number(), 0.0);
  EXPECT_EQ(doc.find("c")->as_number(), 0.0);  // underflow is zero, as in Python
  EXPECT_TRUE(std::signbit(doc.find("d")->as_number()));
  EXPECT_EQ(doc.find("e")->as_number(), 2.2250738585072014e-308);
  EXPECT_EQ(doc.find("f")->as_number(), 1.7976931348623157e308);
  EXPECT_TRUE(doc.find("g")->is_int());
  EXPECT_EQ(parse_error("{\"a\": 1e400}"), "t.json:1:7: Number too big to be stored in double.");
  EXPECT_EQ(parse_error("{\"a\": -123.5e307}"),
            "t.json:1:7: Number too big to be stored in double.");
  EXPECT_EQ(parse_ok("{\"a\": 123456789e-400}").find("a")->as_number(), 0.0);
  EXPECT_EQ(parse_ok("{\"a\": 0.0000001e309}").find("a")->as_number(), 1e302);
  EXPECT_EQ(parse_error("{\"a\": 0.001e99999999999999999999999}"),
            "t.json:1:7: Number too big to be stored in double.");
}

TEST(JsonParse, InvalidUtf8IsRejected) {
  std::string message = parse_error("{\"a\": \"\xff\"}");
  EXPECT_NE(message.find("Invalid encoding"), std::string::npos) << message;
}

TEST(JsonParse, FileErrorsNameThePath) {
  auto r = parse_file("/nonexistent/ds_config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "cannot read config file /nonexistent/ds_config.json: No such file or directory");

  auto path = std::filesystem::temp_directory_path() / "dscore_json_test.json";
  std::ofstream(path) << "{\n\"a\": }";
  auto bad = parse_file(path.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path.string() + ":2:6: Invalid value.");
  std::filesystem::remove(path);
}

TEST(JsonSerialize, RoundTripPreservesValuesAndTypes) {
  const char* text =
      "{\"i\": 42, \"neg\": -7, \"d\": 0.1, \"tiny\": 1e-08, \"big\": 5e8, \"one\": 1.0, \"s\": "
      "\"q\\\"\\n\\u00e9\","
      " \"b\": false, \"n\": null, \"arr\": [1, 2.5, [], {}], \"obj\": {\"z\": 1, \"a\": 2}}";
  Value doc = parse_ok(text);
  for (bool pretty : {false, true}) {
    std::string out = serialize(doc, pretty);
    Value again = parse_ok(out);
    EXPECT_EQ(again, doc) << out;
    EXPECT_EQ(again.find("one")->type(), Type::kDouble) << out;
    EXPECT_EQ(again.find("big")->type(), Type::kDouble) << out;
  }
  // Members keep source order; doubles print shortest.
  EXPECT_EQ(serialize(doc.find("obj") ? *doc.find("obj") : Value()), "{\"z\":1,\"a\":2}");
  EXPECT_EQ(serialize(Value(0.1)), "0.1");
  EXPECT_EQ(serialize(Value(1e-8)), "1e-08");
  EXPECT_EQ(serialize(Value(3.0)), "3.0");
}

TEST(JsonSerialize, PrettyUsesTwoSpaces) {
  Value doc = parse_ok("{\"a\": {\"b\": [1]}}");
  EXPECT_EQ(serialize(doc, true), "{\n  \"a\": {\n    \"b\": [\n      1\n    ]\n  }\n}");
}

TEST(JsonSerialize, NonFiniteDoublesBecomeNull) {
  EXPECT_EQ(serialize(Value(std::nan(""))), "null");
  EXPECT_EQ(serialize(Value(INFINITY)), "null");
}

TEST(JsonValue, SetEraseFindAndEquality) {
  Value obj = Value::object();
  obj.set("a", Value(1));
  obj.set("b", Value("x"));
  obj.set("a", Value(2));
  EXPECT_EQ(obj.members().size(), 2u);
  EXPECT_EQ(obj.find("a")->as_int(), 2);
  EXPECT_TRUE(obj.erase("a"));
  EXPECT_FALSE(obj.erase("a"));
  EXPECT_EQ(obj.find("a"), nullptr);
  EXPECT_NE(Value(1), Value(1.0));  // structural: int and double differ
  EXPECT_TRUE(Value("auto").is_auto());
  EXPECT_FALSE(Value("Auto").is_auto());
  EXPECT_THROW(Value(1).as_string(), std::logic_error);
}

}  // namespace
}  // namespace dscore::json
