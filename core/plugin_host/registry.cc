// Scanning the search path, collecting problems, rejecting duplicate
// kind+name pairs, and case-insensitive lookup with a helpful NOT_FOUND.
#include "core/plugin_host/registry.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include "core/base/strings.h"
#include "core/plugin_host/library.h"
#include "core/plugin_host/validate.h"

namespace dscore::plugin_host {
namespace fs = std::filesystem;

namespace {

struct KindName {
  dscore_plugin_kind kind;
  const char* name;
  const char* plural;
};
constexpr KindName kKinds[] = {
    {DSCORE_KIND_OPTIMIZER, "optimizer", "optimizers"},
    {DSCORE_KIND_SCHEDULER, "scheduler", "schedulers"},
    {DSCORE_KIND_OFFLOAD, "offload", "offloads"},
    {DSCORE_KIND_COMM, "comm", "comms"},
    {DSCORE_KIND_MONITOR, "monitor", "monitors"},
    {DSCORE_KIND_MODEL, "model", "models"},
};

bool is_shared_library_name(const fs::path& p) { return p.extension() == ".so"; }

// Scans one file. A failure is fatal (returned) when `fatal`, else recorded.
class Scanner {
 public:
  Scanner(std::vector<PluginInfo>* plugins, std::vector<LoadProblem>* problems)
      : plugins_(plugins), problems_(problems) {}

  Status scan_file(const std::string& canonical, bool fatal) {
    if (!seen_.insert(canonical).second) return Status::Ok();  // same file via two entries
    Status st = load(canonical);
    if (st.ok()) return st;
    if (fatal) return st;
    problems_->push_back({canonical, st.message()});
    return Status::Ok();
  }

 private:
  Status load(const std::string& canonical) {
    Result<std::shared_ptr<LoadedLibrary>> library = LoadedLibrary::open(canonical);
    if (!library.ok()) return library.status();
    Result<ValidatedLibrary> validated = validate_library(*library);
    if (!validated.ok()) return validated.status();
    for (std::string& note : validated->notes) problems_->push_back({canonical, std::move(note)});
    for (PluginInfo& info : validated->plugins) plugins_->push_back(std::move(info));
    return Status::Ok();
  }

  std::vector<PluginInfo>* plugins_;
  std::vector<LoadProblem>* problems_;
  std::set<std::string> seen_;
};

std::string entry_origin(const SearchPath& path, size_t i) {
  return i < path.origins.size() && !path.origins[i].empty() ? path.origins[i] : "search path";
}

}  // namespace

const char* kind_name(dscore_plugin_kind kind) {
  for (const KindName& k : kKinds)
    if (k.kind == kind) return k.name;
  return "unknown";
}

bool parse_kind(std::string_view text, dscore_plugin_kind* kind) {
  for (const KindName& k : kKinds) {
    if (iequals(text, k.name) || iequals(text, k.plural)) {
      *kind = k.kind;
      return true;
    }
  }
  return false;
}

std::string PluginInfo::display() const {
  return std::string(kind_name(kind)) + " '" + name + "' (" + library_path + ")";
}

Result<std::shared_ptr<PluginRegistry>> PluginRegistry::open(const SearchPath& path) {
  auto registry = std::make_shared<PluginRegistry>();
  registry->search_path_ = path;
  Scanner scanner(&registry->plugins_, &registry->problems_);

  for (size_t i = 0; i < path.entries.size(); ++i) {
    const std::string& entry = path.entries[i];
    const bool is_explicit = i < path.explicit_entry.size() && path.explicit_entry[i];
    std::error_code ec;
    fs::file_status status = fs::status(entry, ec);
    if (ec || !fs::exists(status)) {
      // Built-in folders may legitimately be absent (no install yet); a
      // folder the user named should exist.
      if (is_explicit)
        registry->problems_.push_back(
            {entry, entry_origin(path, i) + " entry " + entry + " does not exist"});
      continue;
    }
    if (fs::is_directory(status)) {
      std::vector<fs::path> files;
      for (const fs::directory_entry& e : fs::directory_iterator(entry, ec)) {
        std::error_code file_ec;
        if (is_shared_library_name(e.path()) && e.is_regular_file(file_ec))
          files.push_back(e.path());
      }
      if (ec) {
        registry->problems_.push_back(
            {entry, "cannot list plugin folder " + entry + ": " + ec.message()});
        continue;
      }
      std::sort(files.begin(), files.end());  // load order must not depend on the file system
      for (const fs::path& file : files) {
        std::string canonical = fs::canonical(file, ec).string();
        if (ec) continue;  // vanished while scanning
        DSCORE_RETURN_IF_ERROR(scanner.scan_file(canonical, false));
      }
      continue;
    }
    std::string canonical = fs::canonical(entry, ec).string();
    if (ec) canonical = fs::absolute(entry).lexically_normal().string();
    // A file named by the user must load: a silently ignored plugin would
    // surface later as a confusing "no optimizer named ...".
    DSCORE_RETURN_IF_ERROR(scanner.scan_file(canonical, is_explicit));
  }

  // Names are unique per kind, ignoring case, across the whole path.
  std::map<std::pair<dscore_plugin_kind, std::string>, const PluginInfo*> by_name;
  for (const PluginInfo& info : registry->plugins_) {
    auto [it, inserted] = by_name.emplace(std::make_pair(info.kind, to_lower(info.name)), &info);
    if (inserted) continue;
    const PluginInfo& first = *it->second;
    std::string where = first.library_path == info.library_path
                            ? "both in " + info.library_path
                            : "in " + first.library_path + " and in " + info.library_path;
    return Status(DSCORE_ALREADY_EXISTS,
                  std::string("two ") + kind_name(info.kind) + " plugins are named '" + first.name +
                      "'" + (first.name != info.name ? " / '" + info.name + "'" : "") +
                      " (names match ignoring case), " + where +
                      "; remove one of them from the plugin search path");
  }
  return registry;
}

std::string_view PluginRegistry::optimizer_alias(std::string_view name) {
  // DeepSpeed's fused implementations by class name: its "Adam" and "Lamb"
  // configs build FusedAdam and FusedLamb, which dscore's adam and lamb
  // plugins implement (docs/deepspeed-reference.md#fusedadam).
  if (iequals(name, "FusedAdam")) return "adam";
  if (iequals(name, "FusedLamb")) return "lamb";
  return {};
}

Result<const PluginInfo*> PluginRegistry::find(dscore_plugin_kind kind,
                                               std::string_view name) const {
  std::vector<std::string> names;
  for (const PluginInfo& info : plugins_) {
    if (info.kind != kind) continue;
    if (iequals(info.name, name)) return &info;
    names.push_back(info.name);
  }
  // A plugin of the alias's own name (above) wins over the alias.
  if (const std::string_view alias = optimizer_alias(name);
      kind == DSCORE_KIND_OPTIMIZER && !alias.empty()) {
    for (const PluginInfo& info : plugins_)
      if (info.kind == kind && info.name == alias) return &info;
  }
  std::sort(names.begin(), names.end());
  std::string message = std::string("no ") + kind_name(kind) + " plugin named '" +
                        std::string(name) + "'" + did_you_mean_suffix(name, names);
  message += names.empty() ? std::string("; no ") + kind_name(kind) + " plugins were found"
                           : std::string("; available: ") + join(names, ", ");
  std::vector<std::string> searched;
  for (const std::string& entry : search_path_.entries) searched.push_back(entry);
  message += ". Searched: " + (searched.empty() ? std::string("(nothing)") : join(searched, ", "));
  if (!problems_.empty()) {
    std::vector<std::string> failed;
    for (const LoadProblem& p : problems_) failed.push_back(p.message);
    message += ". Libraries that failed to load: " + join(failed, "; ");
  }
  message +=
      ". Add the folder holding the plugin to DSCORE_PLUGIN_PATH or \"plugins\": "
      "{\"paths\": [...]} in the config";
  return Status(DSCORE_NOT_FOUND, message);
}

}  // namespace dscore::plugin_host
