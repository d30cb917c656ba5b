// The properties every load_config_text result must have, shared by the
// corpus test and the libFuzzer target. Returns "" when they hold, else
// what is wrong.
#pragma once

#include <string>

#include "core/config/config.h"

namespace dscore::config {

inline std::string check_loaded(const LoadedConfig& c, const std::string& text,
                                const ResolveContext& ctx) {
  if (c.ok() != c.config.has_value())
    return "a config must be built exactly when there are no errors";
  for (const ConfigError& e : c.errors) {
    if (e.message.empty()) return "an error without a message at " + e.path;
    std::string line = format_error(e, c.source_name);
    if (line.find('\n') != std::string::npos || line.find('\r') != std::string::npos)
      return "format_error is not one line: " + line;
  }
  if (!c.ok()) return "";
  // A valid config reloads from its own resolved form to the same result.
  const std::string printed = json::serialize(c.resolved, true);
  LoadedConfig again = load_config_text(printed, "resolved.json", ctx);
  if (!again.ok())
    return "the resolved config does not reload: " +
           format_error(again.errors[0], again.source_name) + "\nresolved:\n" + printed +
           "\ninput:\n" + text;
  if (!(again.resolved == c.resolved))
    return "reloading the resolved config changes it:\n" + printed + "\nvs\n" +
           json::serialize(again.resolved, true);
  return "";
}

}  // namespace dscore::config
