// Tests of core/observability/json_log: one JSON object per line for
// `--log-format json` — escaping, UTC timestamps, the log and progress
// records, and that core/config's JSON parser reads every line back.
#include "core/observability/json_log.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/config/json.h"

namespace dscore::observability {
namespace {

TEST(JsonLog, QuotesAndEscapes) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a \"b\" \\ c\nd\te\x01"), "\"a \\\"b\\\" \\\\ c\\nd\\te\\u0001\"");
  EXPECT_EQ(json_quote("caf\xC3\xA9"), "\"caf\xC3\xA9\"");  // UTF-8 passes through
}

TEST(JsonLog, TimesAreIso8601UtcWithMilliseconds) {
  EXPECT_EQ(iso8601_utc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(iso8601_utc(1700000000.1234), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(iso8601_utc(1700000000.9996),
            "2023-11-14T22:13:21.000Z");  // rounds into the next second
}

TEST(JsonLog, LogLine) {
  EXPECT_EQ(json_log_line(1700000000.5, LogLevel::kWarning, 3, "loss is \"nan\""),
            R"({"time":"2023-11-14T22:13:20.500Z","type":"log","level":"warning","rank":3,)"
            R"("message":"loss is \"nan\""})");
}

TEST(JsonLog, ProgressLine) {
  ProgressRecord p;
  p.step = 10;
  p.total_steps = 100;
  p.loss = 0.6931471805599453;
  p.lr = 1e-05;
  p.samples = 320;
  p.samples_per_second = 1234.5;
  p.skipped = 1;
  p.elapsed_seconds = 0.25;
  EXPECT_EQ(
      json_progress_line(0, 0, p),
      R"({"time":"1970-01-01T00:00:00.000Z","type":"progress","rank":0,"step":10,"total_steps":100,)"
      R"("loss":0.6931471805599453,"lr":1e-05,"samples":320,"samples_per_second":1234.5,"skipped":1,)"
      R"("elapsed_seconds":0.25})");
  p.loss = std::nan("");  // JSON has no NaN: null keeps every line parseable
  EXPECT_NE(json_progress_line(0, 0, p).find(R"("loss":null)"), std::string::npos);
}

TEST(JsonLog, EveryLineParsesBack) {
  ProgressRecord p;
  p.loss = -std::numeric_limits<double>::infinity();
  p.lr = 3e-4;
  const std::string lines[] = {
      json_log_line(1.5, LogLevel::kError, 0, std::string("tab\tnul\x1f")),
      json_progress_line(2.5, 1, p),
      JsonLine().add("a", true).add("b", int64_t{-5}).add("c", 1e300).str(), JsonLine().str()};
  for (const std::string& line : lines) {
    SCOPED_TRACE(line);
    Result<json::Value> v = json::parse(line, "line");
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_TRUE(v->is_object());
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
  Result<json::Value> progress = json::parse(lines[1], "line");
  EXPECT_EQ(progress->find("lr")->as_number(), 3e-4);
  EXPECT_TRUE(progress->find("loss")->is_null());
  EXPECT_EQ(json::parse(lines[0], "line")->find("message")->as_string(), "tab\tnul\x1f");
}

}  // namespace
}  // namespace dscore::observability
