// A plugin's `params` object, validated against the plugin's own schema
// (descriptor->params_schema) with the config validator, "auto" resolved,
// defaults filled, and turned into the dscore_named_value array create()
// receives. Owns all the storage the C views point into.
#pragma once

#include <dscore/plugin.h>

#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/json.h"
#include "core/config/schema.h"
#include "core/plugin_host/registry.h"

namespace dscore::plugin_host {

class ValidatedParams {
 public:
  ValidatedParams() = default;
  ValidatedParams(const ValidatedParams&) = delete;
  ValidatedParams& operator=(const ValidatedParams&) = delete;
  ValidatedParams(ValidatedParams&&) = default;
  ValidatedParams& operator=(ValidatedParams&&) = default;

  // Build from an already-normalised object (tests, host-made params).
  // With `spec` (the plugin's parsed schema) each value takes its declared
  // type: "number" -> DOUBLE even when written as 1, "int" -> INT,
  // "number_or_array" -> DOUBLE or DOUBLE_ARRAY, "json"/object/string arrays
  // -> JSON text. Without it values convert generically: bool, int, double,
  // string, all-number array -> DOUBLE_ARRAY, anything else -> JSON text.
  static ValidatedParams from_object(const json::Value& normalised, const json::Value& as_written,
                                     const config::ObjectSpec* spec = nullptr);

  const json::Value& values() const { return values_; }      // normalised object
  const std::string& raw_json() const { return raw_json_; }  // as the user wrote it
  const dscore_named_value* const* data() const { return pointers_.data(); }
  size_t size() const { return pointers_.size(); }

 private:
  void build_views(const config::ObjectSpec* spec);
  void add_view(const std::string& name, const json::Value& value, const config::FieldSpec* field);
  json::Value values_ = json::Value::object();
  std::string raw_json_ = "{}";
  std::vector<std::unique_ptr<dscore_named_value>> storage_;
  std::vector<const dscore_named_value*> pointers_;
  std::vector<std::unique_ptr<std::string>> strings_;
  std::vector<std::unique_ptr<std::vector<double>>> arrays_;
};

// Validate `params` (an object or null; `path` like "optimizer.params") for
// the plugin. Errors (unknown key with did-you-mean, wrong type, "auto" not
// accepted, a schema-declared "error" key) go to `errors` with the path and
// the location from the user's file; "auto" resolutions and other notes go
// to `notices`. An unparsable schema in the plugin is an error naming the
// plugin. Always returns params (possibly incomplete when errors were added).
ValidatedParams validate_params(const PluginInfo& plugin, const json::Value& params,
                                const std::string& path, const config::AutoResolver& resolve_auto,
                                std::vector<config::ConfigError>* errors,
                                std::vector<config::ConfigNotice>* notices);

}  // namespace dscore::plugin_host
