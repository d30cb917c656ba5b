// Runs a plugin's params_schema through the host's own validator
// (core/config parse_params_schema + validate_object), as the host does for
// a config section, so the monitor tests see what a user's config gets.
#pragma once

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/json.h"
#include "core/config/schema.h"

namespace dscore::testing {

struct HostValidation {
  json::Value params;               // normalised: defaults filled
  std::vector<std::string> errors;  // "path: message"
};

inline HostValidation host_validate(const char* params_schema, const char* params_json) {
  HostValidation out;
  Result<config::ObjectSpec> spec = config::parse_params_schema(params_schema);
  if (!spec.ok()) {
    out.errors.push_back("schema: " + spec.status().message());
    return out;
  }
  Result<json::Value> params = json::parse(params_json, "params");
  if (!params.ok()) {
    out.errors.push_back("params: " + params.status().message());
    return out;
  }
  std::vector<config::ConfigError> errors;
  out.params = config::validate_object(*params, *spec, "params", config::AutoResolver(),
                                       config::ValidationSink{&errors, nullptr});
  for (const config::ConfigError& e : errors) out.errors.push_back(e.path + ": " + e.message);
  return out;
}

}  // namespace dscore::testing
