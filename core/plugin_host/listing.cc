// The data behind `dscore plugins list --json` (listing.h).
#include "core/plugin_host/listing.h"

#include <dscore/optimizer.h>

#include <algorithm>

#include "core/base/strings.h"
#include "core/plugin_host/library.h"

namespace dscore::plugin_host {

std::vector<std::string> capability_names(dscore_plugin_kind kind, uint64_t capabilities) {
  struct Bit {
    uint64_t bit;
    const char* name;
  };
  static const Bit kCommon[] = {{DSCORE_CAP_CPU, "cpu"},   {DSCORE_CAP_CUDA, "cuda"},
                                {DSCORE_CAP_F32, "f32"},   {DSCORE_CAP_F16, "f16"},
                                {DSCORE_CAP_BF16, "bf16"}, {DSCORE_CAP_MULTI_RANK, "multi_rank"}};
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const Bit& b : kCommon) {
    known |= b.bit;
    if (capabilities & b.bit) names.push_back(b.name);
  }
  if (kind == DSCORE_KIND_OPTIMIZER) {
    known |= DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS;
    if (capabilities & DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS) names.push_back("whole_tensors");
  }
  for (int bit = 0; bit < 64; ++bit) {
    uint64_t mask = uint64_t{1} << bit;
    if ((capabilities & mask) && !(known & mask)) names.push_back("bit" + std::to_string(bit));
  }
  return names;
}

json::Value list_json(const PluginRegistry& registry) {
  std::vector<const PluginInfo*> sorted;
  for (const PluginInfo& info : registry.plugins()) sorted.push_back(&info);
  std::sort(sorted.begin(), sorted.end(), [](const PluginInfo* a, const PluginInfo* b) {
    if (a->kind != b->kind) return a->kind < b->kind;
    return to_lower(a->name) < to_lower(b->name);
  });

  json::Value plugins = json::Value::array();
  for (const PluginInfo* info : sorted) {
    json::Value p = json::Value::object();
    p.set("kind", kind_name(info->kind));
    p.set("name", info->name);
    p.set("version", info->version);
    p.set("description", info->description);
    json::Value caps = json::Value::array();
    for (std::string& c : capability_names(info->kind, info->capabilities))
      caps.push_back(std::move(c));
    p.set("capabilities", std::move(caps));
    p.set("abi", std::to_string(info->abi_major) + "." + std::to_string(info->abi_minor));
    p.set("min_host_minor", static_cast<int64_t>(info->min_host_minor));
    json::Value library = json::Value::object();
    library.set("name", info->library_name);
    library.set("version", info->library_version);
    library.set("vendor", info->vendor);
    library.set("path", info->library_path);
    const Result<std::string> digest = info->library->sha256();
    library.set("sha256", digest.ok() ? *digest : "unreadable: " + digest.status().message());
    p.set("library", std::move(library));
    json::Value schema;  // null: the plugin accepts any params object
    if (!info->params_schema.empty()) {
      Result<json::Value> parsed =
          json::parse(info->params_schema, info->display() + " params_schema");
      // Validated at load, so this parses; keep the text if it somehow does not.
      schema = parsed.ok() ? std::move(parsed).value() : json::Value(info->params_schema);
    }
    p.set("params_schema", std::move(schema));
    plugins.push_back(std::move(p));
  }

  json::Value problems = json::Value::array();
  for (const LoadProblem& problem : registry.problems()) {
    json::Value p = json::Value::object();
    p.set("path", problem.path);
    p.set("message", problem.message);
    problems.push_back(std::move(p));
  }
  json::Value search = json::Value::array();
  for (const std::string& entry : registry.search_path().entries) search.push_back(entry);

  json::Value out = json::Value::object();
  out.set("plugins", std::move(plugins));
  out.set("problems", std::move(problems));
  out.set("search_path", std::move(search));
  return out;
}

}  // namespace dscore::plugin_host
