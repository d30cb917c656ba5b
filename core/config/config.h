// Loading a ds_config.json: parse, validate against the schema (every
// DeepSpeed key of docs/deepspeed-reference.md#configuration plus dscore's own
// sections), map deprecated keys, canonicalise aliases, resolve "auto",
// derive the batch triad, and build the typed TrainingConfig. Every problem
// becomes one ConfigError with the JSON path and line:column; nothing stops
// at the first error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::config {

// Inputs to "auto" resolution and the batch triad that come from outside
// the file.
struct ResolveContext {
  int world_size = 1;                  // data-parallel size
  std::optional<int64_t> train_steps;  // `dscore run --steps N` (overrides the file)
  std::optional<int64_t> hidden_size;  // the model's hidden size, when known
  // Report keys of DeepSpeed features dscore does not implement
  // (ErrorKind::kUnsupported) as notices and train without them
  // (`dscore run --allow-unsupported`, InitializeOptions::allow_unsupported).
  bool allow_unsupported = false;
};

// What kind of problem a ConfigError is; the three call for different fixes.
enum class ErrorKind {
  kInvalid,           // a typo, a wrong type or value, a broken rule: fix the file
  kUnsupported,       // a real DeepSpeed feature dscore does not implement: drop it, or
                      // run with --allow-unsupported to train without it
  kDeepSpeedRejects,  // a form DeepSpeed itself rejects but whose meaning is plain
                      // (aio inside zero_optimization): the message names the fix
  kRemoved,           // a block of a feature DeepSpeed has removed (amp, elasticity, ...),
                      // which DeepSpeed now rejects: remove it (the message says what instead)
};

// How an ErrorKind::kUnsupported message ends, and what replaces that end
// when allow_unsupported makes it a warning.
inline constexpr std::string_view kUnsupportedHint =
    " (or run with --allow-unsupported to train without it)";
inline constexpr std::string_view kUnsupportedAllowed =
    " (--allow-unsupported: training without it)";

// "invalid", "unsupported", "deepspeed_rejects", "removed"
const char* error_kind_name(ErrorKind kind);

struct ConfigError {
  std::string path;         // JSON path: "zero_optimization.stage", "" for the document
  json::Location location;  // where in the file, when known
  std::string message;      // what is wrong and how to fix it
  ErrorKind kind = ErrorKind::kInvalid;
};

// Something the user should see but that is not an error: an "auto" value
// and what it resolved to, a deprecated key and its replacement, a section
// dscore accepts but does not act on.
struct ConfigNotice {
  std::string path;
  std::string message;
};

struct LoadedConfig {
  std::string source_name;               // the path, or the name given to load_config_text
  std::optional<TrainingConfig> config;  // set when errors is empty
  json::Value resolved;                  // the full config: defaults filled, aliases and
                                         // deprecated keys mapped, "auto" resolved
  std::vector<ConfigError> errors;
  std::vector<ConfigNotice> notices;
  bool ok() const { return errors.empty(); }
};

LoadedConfig load_config_file(const std::string& path, const ResolveContext& context);
LoadedConfig load_config_text(std::string_view text, std::string_view source_name,
                              const ResolveContext& context);

// "<source>:<line>:<col>: <path>: <message>" (location and path omitted
// when unknown/empty). One line.
std::string format_error(const ConfigError& error, std::string_view source_name);

}  // namespace dscore::config
