#include "core/observability/json_log.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "core/observability/ds_format.h"

namespace dscore::observability {

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string iso8601_utc(double unix_seconds) {
  auto millis = static_cast<int64_t>(std::llround(unix_seconds * 1000.0));
  int64_t seconds = millis / 1000;
  int64_t ms = millis % 1000;
  if (ms < 0) {
    ms += 1000;
    seconds -= 1;
  }
  const auto t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];  // sized for any int fields, so -Wformat-truncation stays quiet
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

void JsonLine::key(std::string_view k) {
  if (!body_.empty()) body_ += ",";
  body_ += json_quote(k) + ":";
}

JsonLine& JsonLine::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += json_quote(value);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, double value) {
  key(k);
  body_ += std::isfinite(value) ? format_repr(value) : "null";
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

std::string json_log_line(double unix_seconds, LogLevel level, int rank, std::string_view message) {
  static const char* const kLevels[] = {"debug", "info", "warning", "error"};
  return JsonLine()
      .add("time", iso8601_utc(unix_seconds))
      .add("type", "log")
      .add("level", kLevels[static_cast<int>(level)])
      .add("rank", rank)
      .add("message", message)
      .str();
}

std::string json_progress_line(double unix_seconds, int rank, const ProgressRecord& p) {
  JsonLine line;
  line.add("time", iso8601_utc(unix_seconds))
      .add("type", "progress")
      .add("rank", rank)
      .add("step", p.step)
      .add("total_steps", p.total_steps)
      .add("loss", p.loss)
      .add("lr", p.lr)
      .add("samples", p.samples)
      .add("samples_per_second", p.samples_per_second)
      .add("skipped", p.skipped)
      .add("elapsed_seconds", p.elapsed_seconds);
  for (const auto& [name, value] : p.metrics) line.add(name, value);
  return line.str();
}

}  // namespace dscore::observability
