// Whether code may be loaded from a file, and from the folders a config
// names. A plugin library runs with the user's rights the moment it is
// loaded, so, as ssh does with keys, dscore refuses one that someone else
// could have written: the file or a folder above it writable by every user
// (a folder with the sticky bit, like /tmp, excepted: others cannot replace
// what is in it), or owned by a user other than this process's and root.
// Group-writable files are allowed (many systems give each user a group).
//
// A ds_config.json is data, often shared: its "plugins": {"paths": [...]}
// may name only folders under the config file's own folder, unless the user
// says they trust it (dscore run --trust-config-plugin-paths,
// InitializeOptions::trust_config_plugin_paths). DSCORE_PLUGIN_PATH and the
// built-in folder are the user's own choice and need no such word.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::plugin_host {

struct TrustPolicy {
  uid_t self = 0;  // besides root, the owner whose files are trusted

  static TrustPolicy of_this_process();  // geteuid()
};

// PERMISSION_DENIED naming the file or folder, what is wrong and the fix.
Status check_library_trusted(const std::string& canonical_path,
                             const TrustPolicy& policy = TrustPolicy::of_this_process());

// PERMISSION_DENIED naming the first entry outside `config_dir` (relative
// entries are resolved against it; "" for a config that is no file, where
// every entry is outside) unless `trusted`.
Status check_config_plugin_paths(const std::vector<std::string>& entries,
                                 const std::string& config_dir, bool trusted);

}  // namespace dscore::plugin_host
