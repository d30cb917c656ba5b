// Optional header-only C++ helpers for plugin authors. Nothing here crosses
// the ABI: it wraps the C types of dscore/plugin.h so a C++ plugin can use
// exceptions and std types inside while every exported function stays a
// plain C function that returns a status.
//
//   DSCORE_PLUGIN_HOST_STORAGE;                 // once per library
//   static dscore_status my_create(const dscore_create_args* a, dscore_optimizer** out) {
//     dscore::sdk::HostRef host(a);             // the new instance's context
//     return dscore::sdk::guard(host, [&] {
//       dscore::sdk::Params p(a);
//       double lr = p.number("lr");
//       if (lr <= 0) throw dscore::sdk::Error(DSCORE_INVALID_ARGUMENT, "lr must be > 0");
//       *out = reinterpret_cast<dscore_optimizer*>(new MyOptimizer(host, lr));
//     });
//   }
#ifndef DSCORE_CPP_PLUGIN_HPP_
#define DSCORE_CPP_PLUGIN_HPP_

#include <dscore/comm.h>
#include <dscore/plugin.h>
#include <dscore/cpp/dtype.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dscore::sdk {

// The host services table, stored by the library's init(): the host's one
// immutable table, the same for every engine (per-engine state lives behind
// the context, see HostRef). Defined once per library with
// DSCORE_PLUGIN_HOST_STORAGE.
const dscore_host_api*& host_slot();

#define DSCORE_PLUGIN_HOST_STORAGE                   \
  const dscore_host_api*& dscore::sdk::host_slot() { \
    static const dscore_host_api* host = nullptr;    \
    return host;                                     \
  }

inline const dscore_host_api* host() { return host_slot(); }

// A library init() that stores the host table; use as the library's init.
inline dscore_status store_host(const dscore_host_api* api, dscore_host_context* /*library*/) {
  host_slot() = api;
  return DSCORE_OK;
}

// The table dscore_plugin_library_v1() returns, for a library built against
// these headers: init stores the host table unless another is given.
//   const dscore_plugin_library kLibrary = dscore::sdk::plugin_library("acme-sgd", "1.0", "acme",
//   kPlugins);
template <size_t N>
constexpr dscore_plugin_library plugin_library(
    const char* name, const char* version, const char* vendor,
    const dscore_plugin_descriptor* const (&plugins)[N],
    dscore_status (*init)(const dscore_host_api*, dscore_host_context*) = &store_host,
    void (*shutdown)(void) = nullptr) {
  return {sizeof(dscore_plugin_library),
          DSCORE_ABI_VERSION_MAJOR,
          DSCORE_ABI_VERSION_MINOR,
          0,
          name,
          version,
          vendor,
          init,
          shutdown,
          N,
          plugins};
}

// The host as one instance sees it: the stored table plus the instance's
// context (dscore_create_args.context). Copy it into the instance at
// create() and make every host call through it. A default HostRef (or a
// library without a stored table, as in unit tests that load no host)
// reaches no host: report() only returns the code, log() drops the line,
// alloc() uses the C allocator.
class HostRef {
 public:
  HostRef() = default;
  explicit HostRef(dscore_host_context* context) : context_(context) {}
  explicit HostRef(const dscore_create_args* args)
      : context_(args != nullptr && DSCORE_HAS_FIELD(args, dscore_create_args, context)
                     ? args->context
                     : nullptr) {}

  dscore_host_context* context() const { return context_; }

  // Record (code, message) as this call's error; returns code.
  dscore_status report(dscore_status code, const char* message) const {
    const dscore_host_api* h = host();
    if (h != nullptr && h->set_error != nullptr) return h->set_error(context_, code, message);
    return code;
  }
  void log(dscore_log_level level, const char* plugin, const std::string& message) const {
    const dscore_host_api* h = host();
    if (h != nullptr && h->log != nullptr) h->log(context_, level, plugin, message.c_str());
  }
  // Counted memory (the context's ledger); NULL on failure.
  void* alloc(size_t bytes, size_t alignment, dscore_memory_kind kind, const char* tag) const {
    const dscore_host_api* h = host();
    if (h != nullptr && h->alloc != nullptr) return h->alloc(context_, bytes, alignment, kind, tag);
    if (kind == DSCORE_MEMORY_DEVICE) return nullptr;
    const size_t a = alignment == 0 ? 64 : alignment;
    return std::aligned_alloc(a, (bytes + a - 1) / a * a);
  }
  void free(void* p, dscore_memory_kind kind) const {
    const dscore_host_api* h = host();
    if (h != nullptr && h->free != nullptr) {
      h->free(context_, p, kind);
    } else {
      std::free(p);
    }
  }
  // The context's communicator for `group`; NULL when there is none.
  const dscore_communicator* communicator(dscore_comm_group group) const {
    const dscore_host_api* h = host();
    return h != nullptr && h->communicator != nullptr ? h->communicator(context_, group) : nullptr;
  }

 private:
  dscore_host_context* context_ = nullptr;
};

// An error a plugin throws inside a guard(): becomes (code, message).
class Error : public std::runtime_error {
 public:
  Error(dscore_status code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  dscore_status code() const { return code_; }

 private:
  dscore_status code_;
};

// Thrown to hand back a status whose message is already recorded for this
// call (a failed host hook, a nested plugin call): guard() returns the code
// without overwriting the message.
struct Reported {
  dscore_status code;
};

// Throw Reported when a host call (a model hook, a communicator call)
// failed, so its own message reaches the user unchanged.
inline void check(dscore_status status) {
  if (status != DSCORE_OK) throw Reported{status};
}

// Run `body` and turn every exception into a status reported on `host`: the
// catch-all every exported function needs so nothing unwinds into the host.
template <typename Body>
dscore_status guard(const HostRef& host, Body&& body) noexcept {
  try {
    if constexpr (std::is_same_v<decltype(body()), dscore_status>) {
      return body();
    } else {
      body();
      return DSCORE_OK;
    }
  } catch (const Reported& r) {
    return r.code;
  } catch (const Error& e) {
    return host.report(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return host.report(DSCORE_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::invalid_argument& e) {
    return host.report(DSCORE_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return host.report(DSCORE_INTERNAL, e.what());
  } catch (...) {
    return host.report(DSCORE_INTERNAL, "unknown C++ exception");
  }
}

// Typed access to the validated params of a create() call.
class Params {
 public:
  explicit Params(const dscore_create_args* args) : args_(args) {}
  // The whole create() arguments (rank, world size, seed, context).
  const dscore_create_args* args() const { return args_; }
  // Whether the host makes the instance only to describe it
  // (DSCORE_CREATE_DESCRIBE_ONLY; false from hosts older than ABI 1.2).
  bool describe_only() const {
    return args_->struct_size >= offsetof(dscore_create_args, flags) + sizeof(args_->flags) &&
           (args_->flags & DSCORE_CREATE_DESCRIBE_ONLY) != 0;
  }
  // The host as the instance being created sees it.
  HostRef host() const { return HostRef(args_); }

  const dscore_named_value* find(std::string_view name) const {
    for (size_t i = 0; i < args_->param_count; ++i) {
      const dscore_named_value* v = args_->params[i];
      if (v != nullptr && v->name != nullptr && name == v->name) return v;
    }
    return nullptr;
  }
  bool has(std::string_view name) const { return find(name) != nullptr; }

  double number(std::string_view name) const {
    const dscore_named_value* v = need(name);
    if (v->type == DSCORE_VALUE_DOUBLE) return v->d;
    if (v->type == DSCORE_VALUE_INT) return static_cast<double>(v->i);
    throw wrong_type(name, "a number");
  }
  double number(std::string_view name, double fallback) const {
    return has(name) ? number(name) : fallback;
  }
  int64_t integer(std::string_view name) const {
    const dscore_named_value* v = need(name);
    if (v->type == DSCORE_VALUE_INT) return v->i;
    throw wrong_type(name, "an integer");
  }
  int64_t integer(std::string_view name, int64_t fallback) const {
    return has(name) ? integer(name) : fallback;
  }
  bool boolean(std::string_view name) const {
    const dscore_named_value* v = need(name);
    if (v->type == DSCORE_VALUE_BOOL) return v->b != 0;
    throw wrong_type(name, "a bool");
  }
  bool boolean(std::string_view name, bool fallback) const {
    return has(name) ? boolean(name) : fallback;
  }
  std::string string(std::string_view name) const {
    const dscore_named_value* v = need(name);
    if (v->type == DSCORE_VALUE_STRING || v->type == DSCORE_VALUE_JSON) return v->s;
    throw wrong_type(name, "a string");
  }
  std::string string(std::string_view name, const std::string& fallback) const {
    return has(name) ? string(name) : fallback;
  }
  // A number or a list of numbers (per-group values) as a vector.
  std::vector<double> numbers(std::string_view name) const {
    const dscore_named_value* v = need(name);
    if (v->type == DSCORE_VALUE_DOUBLE_ARRAY) return {v->doubles, v->doubles + v->count};
    return {number(name)};
  }

 private:
  const dscore_named_value* need(std::string_view name) const {
    const dscore_named_value* v = find(name);
    if (v == nullptr)
      throw Error(DSCORE_INVALID_ARGUMENT, "missing parameter '" + std::string(name) + "'");
    return v;
  }
  static Error wrong_type(std::string_view name, const char* expected) {
    return Error(DSCORE_INVALID_ARGUMENT,
                 "parameter '" + std::string(name) + "' must be " + expected);
  }
  const dscore_create_args* args_;
};

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_PLUGIN_HPP_
