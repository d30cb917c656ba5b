#include "core/plugin_host/trust.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace dscore::plugin_host {
namespace fs = std::filesystem;
namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Why `path` (the library or a folder above it) lets someone else change
// what gets loaded; "" when it does not.
std::string weakness(const fs::path& path, const struct stat& st, const TrustPolicy& policy) {
  const bool sticky_folder = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0;
  if ((st.st_mode & S_IWOTH) != 0 && !sticky_folder)
    return path.string() + " is writable by every user (mode " + octal_mode(st.st_mode) +
           "): anyone could replace the code dscore would run. Fix: chmod o-w " + path.string();
  if (st.st_uid != 0 && st.st_uid != policy.self)
    return path.string() + " is owned by user " + std::to_string(st.st_uid) +
           ", neither this process's user (" + std::to_string(policy.self) +
           ") nor root. Fix: copy the plugin into a folder you own, or have that user install it";
  return "";
}

// Both canonical: `path` is `folder` or below it.
bool is_within(const fs::path& path, const fs::path& folder) {
  const fs::path relative = path.lexically_relative(folder);
  return !relative.empty() && *relative.begin() != "..";
}

}  // namespace

TrustPolicy TrustPolicy::of_this_process() { return TrustPolicy{geteuid()}; }

Status check_library_trusted(const std::string& canonical_path, const TrustPolicy& policy) {
  for (fs::path path(canonical_path);; path = path.parent_path()) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::Ok();  // the loader will say it is missing
    if (const std::string why = weakness(path, st, policy); !why.empty())
      return Status(DSCORE_PERMISSION_DENIED,
                    "plugin library " + canonical_path + " refused: " + why);
    if (!path.has_relative_path()) break;  // the root checked
  }
  return Status::Ok();
}

Status check_config_plugin_paths(const std::vector<std::string>& entries,
                                 const std::string& config_dir, bool trusted) {
  if (trusted) return Status::Ok();
  std::error_code ec;
  const fs::path folder = config_dir.empty() ? fs::path() : fs::weakly_canonical(config_dir, ec);
  for (const std::string& entry : entries) {
    fs::path p(entry);
    if (p.is_relative() && !config_dir.empty()) p = fs::path(config_dir) / p;
    const fs::path resolved = fs::weakly_canonical(p, ec);
    if (!folder.empty() && !ec && is_within(resolved, folder)) continue;
    const std::string where = config_dir.empty()
                                  ? std::string("the config is no file, so it has no folder")
                                  : "it is outside the config file's folder " + folder.string();
    return Status(DSCORE_PERMISSION_DENIED,
                  "plugins.paths entry '" + entry + "' refused: " + where +
                      ", and a ds_config.json shared from elsewhere must not make dscore load "
                      "code from anywhere. Fix: if you trust this config, pass "
                      "--trust-config-plugin-paths (InitializeOptions::trust_config_plugin_paths "
                      "when embedding); or set DSCORE_PLUGIN_PATH=" +
                      entry + "; or move the plugins under the config's folder");
  }
  return Status::Ok();
}

}  // namespace dscore::plugin_host
