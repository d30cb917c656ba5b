// Plugin discovery and validation. The registry scans the search path for
// shared libraries, loads each with Boost.DLL (RTLD_NOW | RTLD_LOCAL,
// absolute paths), reads its dscore_plugin_library_v1 table, validates it
// (struct sizes, ABI major/minor rule, required functions, unique kind+name)
// and indexes its plugins. Listing and validating never call a plugin's
// init() or create(). A library that fails validation is recorded as a
// LoadProblem (shown by `dscore plugins list` and by a failed lookup), not
// fatal, unless the user named that exact file.
#pragma once

#include <dscore/plugin.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace dscore::plugin_host {

class LoadedLibrary;  // library.h

const char* kind_name(dscore_plugin_kind kind);  // "optimizer", "scheduler", ...; "unknown"
// Parses "optimizer", "optimizers", ... (case-insensitive).
bool parse_kind(std::string_view text, dscore_plugin_kind* kind);

struct PluginInfo {
  dscore_plugin_kind kind = 0;
  std::string name;
  std::string version;
  std::string description;
  uint64_t capabilities = 0;
  std::string params_schema;  // "" when the plugin validates nothing
  const dscore_plugin_descriptor* descriptor = nullptr;
  std::shared_ptr<LoadedLibrary> library;  // keeps the code mapped
  // Copied from the library table, for listing and messages:
  std::string library_path;  // absolute
  std::string library_name;
  std::string library_version;
  std::string vendor;
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;
  uint32_t min_host_minor = 0;

  // "optimizer 'adam' (/abs/path/libdscore_adam.so)": how messages name it.
  std::string display() const;
};

struct LoadProblem {
  std::string path;     // the library (or search-path entry) concerned
  std::string message;  // what is wrong and how to fix it
};

// Where to look, in precedence order for messages (all entries are scanned;
// a kind+name found twice is an error naming both files).
struct SearchPath {
  std::vector<std::string> entries;  // directories or explicit .so files
  std::vector<bool> explicit_entry;  // true: the user named it (config/env); a bad file is fatal
  // Where each entry came from, for messages: "plugins.paths",
  // "DSCORE_PLUGIN_PATH", "" for the built-in folders. May be shorter than
  // entries (missing = "").
  std::vector<std::string> origins;

  void add(std::string entry, bool is_explicit, std::string origin = "");

  // The default search path: config "plugins.paths" (relative to
  // `config_dir`), then DSCORE_PLUGIN_PATH (colon-separated), then the
  // plugin folder beside the running executable (<exe>/../lib/dscore/plugins,
  // which is both the build tree's and the install prefix's layout), then
  // the compiled-in install prefix's plugin folder, but only when the folder
  // beside the executable does not exist (a build tree run must not also
  // load an older installed copy of the same plugins: that would be a
  // duplicate). Missing built-in folders are skipped silently; a missing
  // config or environment entry is reported as a LoadProblem.
  static SearchPath standard(const std::vector<std::string>& config_paths,
                             const std::string& config_dir);
};

class PluginRegistry {
 public:
  // Scan and validate. Fails only for an explicitly named file that cannot be
  // loaded or validated, or for duplicate kind+name; other problems are
  // collected in problems().
  static Result<std::shared_ptr<PluginRegistry>> open(const SearchPath& path);

  const std::vector<PluginInfo>& plugins() const { return plugins_; }
  const std::vector<LoadProblem>& problems() const { return problems_; }
  const SearchPath& search_path() const { return search_path_; }

  // Case-insensitive lookup. An optimizer name with no plugin of its own
  // may be one of DeepSpeed's class names for a built-in implementation
  // (optimizer_alias). NOT_FOUND lists the plugins of that kind that
  // exist, a did-you-mean suggestion, the searched folders and any
  // libraries that failed to load.
  Result<const PluginInfo*> find(dscore_plugin_kind kind, std::string_view name) const;
  // The plugin an optimizer alias stands for ("FusedAdam" -> "adam",
  // "FusedLamb" -> "lamb", ignoring case), or "" when `name` is no alias.
  static std::string_view optimizer_alias(std::string_view name);

 private:
  std::vector<PluginInfo> plugins_;
  std::vector<LoadProblem> problems_;
  SearchPath search_path_;
};

}  // namespace dscore::plugin_host
