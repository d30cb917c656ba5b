// Tests for core/config/batch.cc. Golden source: docs/deepspeed-reference.md#batch-size-triad
// (rules, messages and worked examples, W = 2) and #deepspeed-unit-tests (the batch matrix at
// W = 2 of DeepSpeed's tests/unit/runtime/test_ds_config_dict.py, and test_ds_config_model.py's
// {"train_batch_size": 64} at W = 1). Exact integers and exact message text: no tolerance.
#include "core/config/batch.h"

#include <gtest/gtest.h>

namespace dscore::config {
namespace {

using Opt = std::optional<int64_t>;
const Opt kNone = std::nullopt;

BatchOutcome derive(Opt train, Opt micro, Opt gas, int64_t world) {
  return derive_batch(BatchInput{train, micro, gas}, world);
}

void expect_ok(const BatchOutcome& o, int64_t train, int64_t micro, int64_t gas) {
  EXPECT_TRUE(o.ok()) << o.error;
  EXPECT_EQ(o.batch.train_batch_size, train);
  EXPECT_EQ(o.batch.train_micro_batch_size_per_gpu, micro);
  EXPECT_EQ(o.batch.gradient_accumulation_steps, gas);
}

std::string mismatch(int t, int m, int g, int w) {
  return "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
         "gradient_acc_step * world_size " +
         std::to_string(t) + " != " + std::to_string(m) + " * " + std::to_string(g) + " * " +
         std::to_string(w);
}

// docs/deepspeed-reference.md#deepspeed-unit-tests: (train, micro, gas) at W = 2 with all three,
// pairs, singles.
TEST(BatchTriad, DeepSpeedMatrixSucceeding) {
  // (32, 16, 1)
  expect_ok(derive(32, 16, 1, 2), 32, 16, 1);
  expect_ok(derive(32, 16, kNone, 2), 32, 16, 1);
  expect_ok(derive(32, kNone, 1, 2), 32, 16, 1);
  expect_ok(derive(kNone, 16, 1, 2), 32, 16, 1);
  expect_ok(derive(kNone, 16, kNone, 2), 32, 16, 1);
  expect_ok(derive(32, kNone, kNone, 2), 32, 16, 1);
  // (32, 8, 2)
  expect_ok(derive(32, 8, 2, 2), 32, 8, 2);
  expect_ok(derive(32, 8, kNone, 2), 32, 8, 2);
  expect_ok(derive(32, kNone, 2, 2), 32, 8, 2);
  expect_ok(derive(kNone, 8, 2, 2), 32, 8, 2);
}

TEST(BatchTriad, DeepSpeedMatrixFailing) {
  // (33, 17, 2)
  EXPECT_EQ(derive(33, 17, 2, 2).error, mismatch(33, 17, 2, 2));
  EXPECT_EQ(derive(33, 17, kNone, 2).error,
            "Gradient accumulation steps: 0 has to be greater than 0");
  EXPECT_EQ(derive(33, kNone, 2, 2).error, mismatch(33, 8, 2, 2));
  EXPECT_EQ(derive(kNone, kNone, 2, 2).error,
            "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
  // (32, 18, 1)
  EXPECT_EQ(derive(32, 18, 1, 2).error, mismatch(32, 18, 1, 2));
  EXPECT_EQ(derive(32, 18, kNone, 2).error,
            "Gradient accumulation steps: 0 has to be greater than 0");
  EXPECT_EQ(derive(kNone, kNone, 1, 2).error,
            "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
}

// docs/deepspeed-reference.md#batch-size-triad worked examples, W = 2.
TEST(BatchTriad, WorkedExamples) {
  expect_ok(derive(32, kNone, kNone, 2), 32, 16, 1);
  expect_ok(derive(kNone, 4, kNone, 2), 8, 4, 1);
  expect_ok(derive(32, 4, kNone, 2), 32, 4, 4);
  expect_ok(derive(32, kNone, 4, 2), 32, 4, 4);
  EXPECT_EQ(derive(30, 4, kNone, 2).error, mismatch(30, 4, 3, 2));
  BatchOutcome gas0 = derive(33, 17, kNone, 2);
  EXPECT_EQ(gas0.error, "Gradient accumulation steps: 0 has to be greater than 0");
  EXPECT_EQ(gas0.error_key, "gradient_accumulation_steps");
  BatchOutcome micro0 = derive(1, kNone, kNone, 2);
  EXPECT_EQ(micro0.error, "Micro batch size per gpu: 0 has to be greater than 0");
  EXPECT_EQ(micro0.error_key, "train_micro_batch_size_per_gpu");
  EXPECT_EQ(derive(33, kNone, 2, 2).error, mismatch(33, 8, 2, 2));
  EXPECT_EQ(derive(kNone, kNone, kNone, 2).error,
            "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
}

TEST(BatchTriad, WorldSizeOne) {
  expect_ok(derive(64, kNone, kNone, 1), 64, 64, 1);  // test_ds_config_model.py
  expect_ok(derive(32, 4, kNone, 1), 32, 4, 8);
  expect_ok(derive(kNone, 4, 3, 1), 12, 4, 3);
  EXPECT_EQ(derive(30, 4, kNone, 1).error, mismatch(30, 4, 7, 1));
}

TEST(BatchTriad, AssertionOrderAndZeroValues) {
  // train is checked first, then micro, then gas.
  BatchOutcome t0 = derive(0, 4, kNone, 2);
  EXPECT_EQ(t0.error, "Train batch size: 0 has to be greater than 0");
  EXPECT_EQ(t0.error_key, "train_batch_size");
  EXPECT_EQ(derive(8, 0, 1, 2).error, "Micro batch size per gpu: 0 has to be greater than 0");
  EXPECT_EQ(derive(8, 4, 0, 2).error, "Gradient accumulation steps: 0 has to be greater than 0");
  EXPECT_EQ(derive(kNone, -2, kNone, 2).error, "Train batch size: -4 has to be greater than 0");
  // Where DeepSpeed divides by zero, dscore reports the key's assertion.
  EXPECT_EQ(derive(32, 0, kNone, 2).error, "Micro batch size per gpu: 0 has to be greater than 0");
  EXPECT_EQ(derive(32, kNone, 0, 2).error,
            "Gradient accumulation steps: 0 has to be greater than 0");
}

TEST(BatchTriad, FloorDivisionRoundsDownLikePython) {
  // (33 // 2) // -5 = 16 // -5 = -4 in Python (C++ truncation would give -3).
  EXPECT_EQ(derive(33, kNone, -5, 2).error,
            "Micro batch size per gpu: -4 has to be greater than 0");
}

TEST(BatchTriad, OverflowIsAnErrorNotUndefinedBehaviour) {
  BatchOutcome o = derive(kNone, int64_t{1} << 62, 4, 2);
  EXPECT_EQ(o.error, "the batch sizes overflow a 64-bit integer");
  EXPECT_EQ(derive(INT64_MIN, -1, kNone, 1).error, "the batch sizes overflow a 64-bit integer");
  EXPECT_FALSE(derive(INT64_MAX, 1, 3, 2).ok());
}

// ------------------------------------------------------- resolve_batch

struct Resolved {
  json::Value doc;
  std::vector<ConfigError> errors;
  std::vector<ConfigNotice> notices;
};

// `resolved_text` is what the validator would leave: "auto" keys absent.
Resolved resolve(const char* written_text, const char* resolved_text, int64_t world) {
  Resolved r;
  json::Value written = *json::parse(written_text, "w");
  r.doc = *json::parse(resolved_text, "r");
  resolve_batch(written, &r.doc, world, &r.errors, &r.notices);
  return r;
}

TEST(ResolveBatch, WritesAllThreeKeysFirst) {
  Resolved r = resolve(R"({"seed": 1, "train_batch_size": 32})",
                       R"({"seed": 1, "train_batch_size": 32})", 2);
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(
      json::serialize(r.doc),
      R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":16,"gradient_accumulation_steps":1,"seed":1})");
  EXPECT_TRUE(r.notices.empty());  // nothing was "auto"
}

TEST(ResolveBatch, AutoCountsAsNotProvided) {
  Resolved r = resolve(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})",
      R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 2);
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.doc.find("train_batch_size")->as_int(), 16);
  ASSERT_EQ(r.notices.size(), 1u);
  EXPECT_EQ(r.notices[0].path, "train_batch_size");
  EXPECT_EQ(r.notices[0].message, "\"auto\" -> 16 (micro 4 * gas 2 * world size 2)");
}

TEST(ResolveBatch, AllAutoMeansOneSamplePerRank) {
  Resolved r = resolve(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"})",
      "{}", 2);
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.doc.find("train_batch_size")->as_int(), 2);
  EXPECT_EQ(r.doc.find("train_micro_batch_size_per_gpu")->as_int(), 1);
  EXPECT_EQ(r.doc.find("gradient_accumulation_steps")->as_int(), 1);
  ASSERT_EQ(r.notices.size(), 3u);
  EXPECT_EQ(r.notices[1].message,
            "\"auto\" -> 1 (neither train_batch_size nor a micro-batch size is given: one sample "
            "per rank per "
            "micro-batch)");
}

TEST(ResolveBatch, AutoTrainWithGasGivenUsesMicroOne) {
  Resolved r = resolve(R"({"train_batch_size": "auto", "gradient_accumulation_steps": 4})",
                       R"({"gradient_accumulation_steps": 4})", 2);
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.doc.find("train_batch_size")->as_int(), 8);
  EXPECT_EQ(r.doc.find("train_micro_batch_size_per_gpu")->as_int(), 1);
}

TEST(ResolveBatch, NothingGivenIsDeepSpeedsError) {
  Resolved r = resolve("{}", "{}", 1);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].path, "");
  EXPECT_EQ(r.errors[0].message,
            "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
}

TEST(ResolveBatch, ErrorsPointAtTheKey) {
  const char* text = "{\n  \"train_batch_size\": 30,\n  \"train_micro_batch_size_per_gpu\": 4\n}";
  Resolved r = resolve(text, text, 2);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].path, "train_batch_size");
  EXPECT_EQ(r.errors[0].location.line, 2);
  EXPECT_EQ(r.errors[0].location.column, 23);
  EXPECT_EQ(r.errors[0].message, mismatch(30, 4, 3, 2));
}

TEST(ResolveBatch, DerivedKeyErrorsPointAtTheFirstGivenKeyAndSayHow) {
  const char* text = "{\"train_batch_size\": 33, \"train_micro_batch_size_per_gpu\": 17}";
  Resolved r = resolve(text, text, 2);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].path, "gradient_accumulation_steps");
  EXPECT_EQ(r.errors[0].location.column, 22);
  EXPECT_EQ(r.errors[0].message,
            "Gradient accumulation steps: 0 has to be greater than 0 (gradient_accumulation_steps "
            "derived as "
            "(train 33 // micro 17) // world size 2)");
}

TEST(ResolveBatch, SkippedWhenABatchKeyAlreadyFailedValidation) {
  Resolved r;
  json::Value written = *json::parse(R"({"train_batch_size": "32"})", "w");
  r.doc = json::Value::object();
  r.errors.push_back({"train_batch_size", {}, "expected an int, got string \"32\""});
  resolve_batch(written, &r.doc, 1, &r.errors, &r.notices);
  EXPECT_EQ(r.errors.size(), 1u);  // no second, confusing "Either ..." error
}

}  // namespace
}  // namespace dscore::config
