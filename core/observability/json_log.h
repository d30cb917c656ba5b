// Structured log lines for `dscore run --log-format json`: one JSON object per
// line, so a log shipper or `jq` reads them without parsing text. Two kinds:
//   {"time":"2025-02-21T10:00:00.123Z","type":"log","level":"info","rank":0,"message":"..."}
//   {"time":"...","type":"progress","rank":0,"step":10,"total_steps":100,"loss":0.5,
//    "lr":0.001,"samples":320,"samples_per_second":1234.5,"skipped":0}
// Numbers are written as Python's repr writes them (shortest round-trip);
// NaN and infinities, which JSON cannot hold, become null.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/logging.h"

namespace dscore::observability {

// A JSON string literal, quotes included (control characters as \u00XX;
// UTF-8 passes through).
std::string json_quote(std::string_view text);

// "2025-02-21T10:00:00.123Z": UTC, millisecond precision.
std::string iso8601_utc(double unix_seconds);

// Builds one object; add() appends members in call order.
class JsonLine {
 public:
  JsonLine& add(std::string_view key, std::string_view value);
  JsonLine& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  JsonLine& add(std::string_view key, int64_t value);
  JsonLine& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonLine& add(std::string_view key, double value);
  JsonLine& add(std::string_view key, bool value);
  // The object text, without a trailing newline.
  std::string str() const { return body_.empty() ? "{}" : "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

std::string json_log_line(double unix_seconds, LogLevel level, int rank, std::string_view message);

struct ProgressRecord {
  int64_t step = 0;         // optimizer steps done
  int64_t total_steps = 0;  // 0 = unknown
  double loss = 0;
  double lr = 0;
  int64_t samples = 0;  // global samples so far
  double samples_per_second = 0;
  int64_t skipped = 0;
  // Seconds since the run's first step began (the reporter's start): two
  // records time the steps between them (`dscore autotune`'s window).
  double elapsed_seconds = 0;
  // The model's measurements (MoE's "moe/aux_loss", ...): members by name.
  std::vector<std::pair<std::string, double>> metrics;
};

std::string json_progress_line(double unix_seconds, int rank, const ProgressRecord& progress);

}  // namespace dscore::observability
