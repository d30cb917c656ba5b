// Optional header-only helpers: the C-ABI shim every C++ plugin instance
// needs, written once. A plugin class derives from sdk::Instance (which
// keeps the instance's HostRef); sdk::Shim<Handle, T> turns the opaque
// handle back into the object and runs a member under guard() with the
// instance's own context, and creates/destroys instances the same way for
// every kind. The kind adapters (optimizer_plugin.hpp, monitor_plugin.hpp,
// model_plugin.hpp) build their vtables from these pieces. Nothing here
// crosses the ABI.
#ifndef DSCORE_CPP_INSTANCE_HPP_
#define DSCORE_CPP_INSTANCE_HPP_

#include <dscore/cpp/plugin.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace dscore::sdk {

// The base of a plugin instance: the host as this instance sees it.
class Instance {
 public:
  explicit Instance(HostRef host) : host_(host) {}
  virtual ~Instance() = default;
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const HostRef& host() const { return host_; }

 private:
  HostRef host_;
};

// Shims between an opaque ABI handle type and the C++ class T behind it.
template <typename Handle, typename T>
struct Shim {
  static_assert(std::is_base_of_v<Instance, T>, "plugin classes derive from sdk::Instance");

  static T& self(Handle* h) { return *reinterpret_cast<T*>(h); }
  static const T& self(const Handle* h) { return *reinterpret_cast<const T*>(h); }

  // create(): T(HostRef, Params, extra...) under guard() with the new
  // instance's context; *out is set only on success.
  template <typename... Extra>
  static dscore_status create(const dscore_create_args* args, Handle** out, Extra&&... extra) {
    HostRef host(args);
    return guard(host, [&] {
      if (args == nullptr || out == nullptr)
        throw Error(DSCORE_INVALID_ARGUMENT, "create: args and out must not be NULL");
      auto instance = std::make_unique<T>(host, Params(args), std::forward<Extra>(extra)...);
      *out = reinterpret_cast<Handle*>(instance.release());
    });
  }

  static void destroy(Handle* h) {
    if (h == nullptr) return;
    HostRef host = self(h).host();
    guard(host, [&] { delete &self(h); });
  }

  // Run fn(T&) under guard() with the instance's context.
  template <typename Fn>
  static dscore_status call(Handle* h, Fn&& fn) {
    T& t = self(h);
    return guard(t.host(), [&] { return fn(t); });
  }
  template <typename Fn>
  static dscore_status call(const Handle* h, Fn&& fn) {
    const T& t = self(h);
    return guard(t.host(), [&] { return fn(t); });
  }
};

}  // namespace dscore::sdk

// Define the library's entry symbol returning `library` (a static
// dscore_plugin_library, e.g. from sdk::plugin_library()) and the library's
// host-table storage (DSCORE_PLUGIN_HOST_STORAGE). Once per library, at
// global scope.
#define DSCORE_PLUGIN_ENTRY(library)                                                            \
  DSCORE_PLUGIN_HOST_STORAGE                                                                    \
  extern "C" DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) { \
    return &(library);                                                                          \
  }

// The line that ends a plugin library: a library table named `name` holding
// the given descriptors (their addresses), whose init stores the host table,
// with the entry symbol and the host-table storage. Once per library, at
// global scope:
//   DSCORE_PLUGIN_LIBRARY("acme-sgd", "1.0", "acme", &acme::kSgd)
// A library with its own init/shutdown builds its table with
// sdk::plugin_library and uses DSCORE_PLUGIN_ENTRY.
#define DSCORE_PLUGIN_LIBRARY(name, version, vendor, ...)                           \
  namespace {                                                                       \
  const dscore_plugin_descriptor* const dscore_library_plugins[] = {__VA_ARGS__};   \
  const dscore_plugin_library dscore_library =                                      \
      ::dscore::sdk::plugin_library(name, version, vendor, dscore_library_plugins); \
  }                                                                                 \
  DSCORE_PLUGIN_ENTRY(dscore_library)

#endif  // DSCORE_CPP_INSTANCE_HPP_
