// The default plugin search path (registry.h, SearchPath::standard): config
// entries, DSCORE_PLUGIN_PATH, the folder beside the executable, and the
// compiled-in install prefix as a fallback.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/plugin_host/registry.h"

#ifndef DSCORE_INSTALL_PLUGIN_DIR
#define DSCORE_INSTALL_PLUGIN_DIR ""
#endif
#ifndef DSCORE_PLUGIN_SUBDIR  // relative to the prefix: lib/dscore/plugins, lib64/...
#define DSCORE_PLUGIN_SUBDIR "lib/dscore/plugins"
#endif

namespace dscore::plugin_host {
namespace fs = std::filesystem;

namespace {

// The running executable's folder, from /proc/self/exe ("" if unreadable).
fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path();
}

}  // namespace

void SearchPath::add(std::string entry, bool is_explicit, std::string origin) {
  origins.resize(entries.size());
  entries.push_back(std::move(entry));
  explicit_entry.resize(entries.size() - 1);
  explicit_entry.push_back(is_explicit);
  origins.push_back(std::move(origin));
}

SearchPath SearchPath::standard(const std::vector<std::string>& config_paths,
                                const std::string& config_dir) {
  SearchPath path;
  for (const std::string& entry : config_paths) {
    fs::path p(entry);
    if (p.is_relative() && !config_dir.empty()) p = fs::path(config_dir) / p;
    path.add(p.lexically_normal().string(), true, "plugins.paths");
  }
  if (const char* env = std::getenv("DSCORE_PLUGIN_PATH"); env != nullptr) {
    std::string text(env);
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find(':', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) path.add(text.substr(start, end - start), true, "DSCORE_PLUGIN_PATH");
      start = end + 1;
    }
  }
  fs::path beside_exe;
  if (fs::path dir = executable_dir(); !dir.empty()) {
    beside_exe = (dir / ".." / DSCORE_PLUGIN_SUBDIR).lexically_normal();
    path.add(beside_exe.string(), false);
  }
  std::error_code ec;
  const std::string install_dir = DSCORE_INSTALL_PLUGIN_DIR;
  if (!install_dir.empty() && (beside_exe.empty() || !fs::is_directory(beside_exe, ec)))
    path.add(install_dir, false);
  return path;
}

}  // namespace dscore::plugin_host
