// Validation of a plugin library's static table (docs/architecture.md#the-plugin-abi): the
// struct sizes, the ABI major/minor rule, the descriptors (kind, name,
// vtable size, every required function non-NULL) and each params schema.
// Reads static data only: no plugin function is called.
#pragma once

#include <dscore/plugin.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/plugin_host/registry.h"

namespace dscore::plugin_host {

// The ABI version rule alone. nullopt when a library built against
// 1.abi_minor (needing host minor min_host_minor) loads into a host of
// 1.host_minor; else the reason, with the fix, naming `library` (e.g.
// "library 'x' (/p/libx.so)").
std::optional<std::string> abi_version_problem(const std::string& library, uint32_t abi_major,
                                               uint32_t abi_minor, uint32_t min_host_minor,
                                               uint32_t host_minor = DSCORE_ABI_VERSION_MINOR);

struct ValidatedLibrary {
  std::vector<PluginInfo> plugins;  // each holds the library
  std::vector<std::string> notes;   // skipped plugins of kinds from a newer minor
};

// Validate `library`'s table. The error (FAILED_PRECONDITION) names the
// library or the plugin, its path and the field, with the fix.
Result<ValidatedLibrary> validate_library(const std::shared_ptr<LoadedLibrary>& library,
                                          uint32_t host_minor = DSCORE_ABI_VERSION_MINOR);

}  // namespace dscore::plugin_host
