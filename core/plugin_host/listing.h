// What `dscore plugins list --json` prints: every plugin of a registry with
// its kind, name, versions, capabilities, library and params schema, plus
// the search path and the libraries that failed to load. Reads the
// registry's static data only; no plugin code runs.
#pragma once

#include <string>
#include <vector>

#include "core/config/json.h"
#include "core/plugin_host/registry.h"

namespace dscore::plugin_host {

// Names of the capability bits set in `capabilities` for a plugin of
// `kind` ("cpu", "cuda", "f32", "f16", "bf16", "multi_rank",
// "whole_tensors"); unknown bits as "bit<N>".
std::vector<std::string> capability_names(dscore_plugin_kind kind, uint64_t capabilities);

// {"plugins": [{"kind", "name", "version", "description", "capabilities": [...],
//               "abi": "1.0", "min_host_minor", "library": {"name", "version",
//               "vendor", "path"}, "params_schema": <object or null>}, ...],
//  "problems": [{"path", "message"}, ...], "search_path": [...]}
// Plugins are sorted by kind, then name.
json::Value list_json(const PluginRegistry& registry);

}  // namespace dscore::plugin_host
