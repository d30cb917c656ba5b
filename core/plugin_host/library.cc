// Loading a plugin library with Boost.DLL and running its init()/shutdown()
// exactly once per load. A process-wide map from canonical path to the live
// LoadedLibrary makes a second open of the same file share the first (the
// dynamic loader would hand back the same handle anyway, and init() must
// not run twice on one copy of the code).
#include "core/plugin_host/library.h"

#include <dlfcn.h>

#include <boost/dll/shared_library.hpp>
#include <filesystem>
#include <map>

#include "core/base/sha256.h"
#include "core/plugin_host/call.h"
#include "core/plugin_host/elf_check.h"
#include "core/plugin_host/host_api.h"
#include "core/plugin_host/trust.h"

namespace dscore::plugin_host {

struct LoadedLibrary::Handle {
  boost::dll::shared_library library;
};

namespace {

std::mutex g_open_mutex;
std::map<std::string, std::weak_ptr<LoadedLibrary>>& open_libraries() {
  static auto* libraries = new std::map<std::string, std::weak_ptr<LoadedLibrary>>();
  return *libraries;
}

// Boost.DLL reports only "bad file descriptor"; the loader's own text says
// what is really wrong (an undefined symbol, a wrong ELF class).
std::string loader_error(const std::string& path) {
  const char* text = dlerror();
  if (text != nullptr) return text;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    text = dlerror();
    return text != nullptr ? text : "unknown loader error";
  }
  dlclose(handle);
  return "unknown loader error";
}

}  // namespace

LoadedLibrary::LoadedLibrary(std::string path, std::unique_ptr<Handle> handle,
                             const dscore_plugin_library* table)
    : path_(std::move(path)), handle_(std::move(handle)), table_(table) {}

Result<std::shared_ptr<LoadedLibrary>> LoadedLibrary::open(const std::string& canonical_path) {
  std::lock_guard<std::mutex> lock(g_open_mutex);
  auto& libraries = open_libraries();
  if (auto it = libraries.find(canonical_path); it != libraries.end()) {
    if (auto existing = it->second.lock()) return existing;
  }

  // Before dlopen, which runs the library's code: a file someone else could
  // have written is refused (trust.h).
  if (Status refused = check_library_trusted(canonical_path); !refused.ok()) return refused;
  // Before dlopen: it maps the file, and a truncated one faults (SIGBUS)
  // instead of failing.
  if (Status damaged = check_elf_file(canonical_path); !damaged.ok())
    return Status(DSCORE_FAILED_PRECONDITION,
                  canonical_path + ": cannot be loaded: " + damaged.message());
  auto handle = std::make_unique<Handle>();
  boost::dll::fs::error_code ec;
  dlerror();  // clear a stale message so loader_error() reads this load's
  handle->library.load(boost::dll::fs::path(canonical_path), ec,
                       boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec || !handle->library.is_loaded()) {
    return Status(DSCORE_FAILED_PRECONDITION,
                  canonical_path + ": cannot be loaded: " + loader_error(canonical_path));
  }
  if (!handle->library.has(DSCORE_PLUGIN_ENTRY_SYMBOL)) {
    return Status(DSCORE_FAILED_PRECONDITION,
                  canonical_path + ": not a dscore plugin: no symbol " DSCORE_PLUGIN_ENTRY_SYMBOL
                                   " (a plugin must export it; see sdk/examples)");
  }
  auto entry = handle->library.get<const dscore_plugin_library*()>(DSCORE_PLUGIN_ENTRY_SYMBOL);
  HostContext entry_context;  // the entry symbol may call no host service; this only catches
  Result<const dscore_plugin_library*> table = call_plugin_value<const dscore_plugin_library*>(
      entry_context, canonical_path, DSCORE_PLUGIN_ENTRY_SYMBOL, [&] { return entry(); });
  if (!table.ok()) return table.status();
  if (*table == nullptr) {
    return Status(DSCORE_FAILED_PRECONDITION,
                  canonical_path + ": " DSCORE_PLUGIN_ENTRY_SYMBOL
                                   " returned NULL (it must return a pointer to a static "
                                   "dscore_plugin_library)");
  }
  std::shared_ptr<LoadedLibrary> library(
      new LoadedLibrary(canonical_path, std::move(handle), *table));
  libraries[canonical_path] = library;
  return library;
}

LoadedLibrary::~LoadedLibrary() {
  // Held throughout, so a concurrent open() of the same file waits until
  // this copy is shut down and unmapped instead of sharing a dying mapping.
  std::lock_guard<std::mutex> open_lock(g_open_mutex);
  {
    std::lock_guard<std::mutex> lock(init_mutex_);
    // shutdown() pairs with a successful init() only; a library whose init
    // failed is "unusable" and owes no cleanup call.
    if (init_status_ && init_status_->ok() && table_->shutdown != nullptr) {
      call_plugin_void(context_, "library '" + display_name() + "' (" + path_ + ")", "shutdown",
                       [&] { table_->shutdown(); });
    }
  }
  auto& libraries = open_libraries();
  auto it = libraries.find(path_);
  if (it != libraries.end() && it->second.expired()) libraries.erase(it);
  table_ = nullptr;
  handle_.reset();  // unmap last, after shutdown() returned
}

Result<std::string> LoadedLibrary::sha256() const {
  std::lock_guard<std::mutex> lock(sha256_mutex_);
  if (!sha256_) sha256_ = sha256_of_file(path_);
  return *sha256_;
}

std::string LoadedLibrary::display_name() const {
  if (table_ != nullptr && table_->name != nullptr && table_->name[0] != '\0') return table_->name;
  return std::filesystem::path(path_).filename().string();
}

Status LoadedLibrary::ensure_initialized() {
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (init_status_) return *init_status_;
  // From its first use on, the library's code may have started threads
  // (a TBB pool) that outlive shutdown(); unmapping it under them would
  // crash, so a used library stays mapped until the process ends. Listed,
  // never-used libraries still unload normally.
  if (void* pin = dlopen(path_.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) dlclose(pin);
  if (table_->init == nullptr) {
    init_status_ = Status::Ok();
    return *init_status_;
  }
  std::string who = "library '" + display_name() + "' (" + path_ + ")";
  Status st = call_plugin(context_, who, "init",
                          [&] { return table_->init(host_api(), context_.handle()); });
  if (!st.ok()) {
    st = Status(st.code(), st.message() +
                               "; the library cannot be used (its init() failed; fix what the "
                               "message says or remove the library from the plugin path)");
  }
  init_status_ = st;
  return st;
}

bool LoadedLibrary::initialized() const {
  std::lock_guard<std::mutex> lock(init_mutex_);
  return init_status_.has_value() && init_status_->ok();
}

bool library_is_open(const std::string& canonical_path) {
  std::lock_guard<std::mutex> lock(g_open_mutex);
  auto& libraries = open_libraries();
  auto it = libraries.find(canonical_path);
  return it != libraries.end() && !it->second.expired();
}

}  // namespace dscore::plugin_host
