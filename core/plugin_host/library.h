// One loaded plugin library: the Boost.DLL handle (RTLD_NOW | RTLD_LOCAL,
// absolute canonical path), the table its dscore_plugin_library_v1 returned,
// and the library's lifecycle: init(host_api, library context) once, lazily, before the first
// create(); shutdown() once when the last reference goes. Instances and
// PluginInfo hold shared_ptr<LoadedLibrary>, so the code stays mapped as long
// as anything made from it is alive; a library that was used (initialised)
// is never unmapped at all (RTLD_NODELETE), since threads it started may
// outlive its shutdown().
#pragma once

#include <dscore/plugin.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/base/status.h"
#include "core/plugin_host/host_context.h"

namespace dscore::plugin_host {

class LoadedLibrary {
 public:
  // Load the library at `canonical_path` and read its entry table. Does not
  // validate the table (validate.h) and never calls init(). While a
  // LoadedLibrary for the path is alive, opening it again returns the same
  // object, so init()/shutdown() run once per load however many registries
  // see the file. Errors (FAILED_PRECONDITION) start with the path:
  //   "<path>: cannot be loaded: <dlerror text>"
  //   "<path>: cannot be loaded: truncated ELF: ..." (elf_check.h; checked
  //     before the loader maps the file, which would fault on it)
  //   "<path>: not a dscore plugin: no symbol dscore_plugin_library_v1 (...)"
  //   "<path>: dscore_plugin_library_v1 returned NULL (...)"
  static Result<std::shared_ptr<LoadedLibrary>> open(const std::string& canonical_path);

  ~LoadedLibrary();
  LoadedLibrary(const LoadedLibrary&) = delete;
  LoadedLibrary& operator=(const LoadedLibrary&) = delete;

  const std::string& path() const { return path_; }
  const dscore_plugin_library* table() const { return table_; }
  // The table's name, or the file name when the table has none.
  std::string display_name() const;
  // The SHA-256 of the file (hex), read on the first call and kept; an error
  // names the file. Names the code loaded, for the log and the listing.
  Result<std::string> sha256() const;

  // Call the library's init(host_api(), its own context) the first time; later calls return
  // the first outcome. A failure names the library and its path. Thread-safe.
  Status ensure_initialized();
  bool initialized() const;

 private:
  struct Handle;  // the Boost.DLL object, kept out of this header
  LoadedLibrary(std::string path, std::unique_ptr<Handle> handle,
                const dscore_plugin_library* table);

  std::string path_;
  std::unique_ptr<Handle> handle_;
  const dscore_plugin_library* table_ = nullptr;
  mutable std::mutex init_mutex_;
  std::optional<Status> init_status_;  // set once init() ran (or was absent)
  mutable std::mutex sha256_mutex_;
  mutable std::optional<Result<std::string>> sha256_;
  // The context of library-level calls (init, shutdown, the entry symbol):
  // they belong to no engine.
  HostContext context_;
};

// True while a LoadedLibrary for `canonical_path` is alive (the file is
// still mapped through it): for tests of the lifetime rules.
bool library_is_open(const std::string& canonical_path);

}  // namespace dscore::plugin_host
