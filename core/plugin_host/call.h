// The one way core calls into plugin code. Every call: marks the thread as
// running "<function> of <plugin>" for the crash handler, clears the
// calling thread's error slot in the instance's host context, calls, catches any C++ exception that
// escaped the plugin (a bug in the plugin: exports must catch everything), and turns the returned
// dscore_status plus the plugin's set_error message into a Status that names the plugin and the
// function.
#pragma once

#include <dscore/plugin.h>

#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/base/status.h"
#include "core/plugin_host/crash_handler.h"
#include "core/plugin_host/host_context.h"

namespace dscore::plugin_host {

// The Status for a status `code` returned by `function` of `plugin`, using
// and clearing this thread's error slot in `host`:
//   OK                 -> OK
//   a code of the enum -> (code, "<plugin> <function>: <message>"), message
//                         "failed with <CODE> and no message" when none was set
//   anything else      -> INTERNAL "<plugin> <function> returned an invalid status <n>"
Status status_from_plugin(HostContext& host, std::string_view plugin, std::string_view function,
                          dscore_status code);

// INTERNAL: "<plugin> threw a C++ exception out of <function> across the C
// ABI; its exported functions must catch everything (use dscore::sdk::guard
// from dscore/cpp/plugin.hpp)", plus the exception's what() when known.
Status exception_status(HostContext& host, std::string_view plugin, std::string_view function,
                        const char* what);

// Call `fn` (returning dscore_status) as `function` of `plugin` (its
// display name), an instance living in `host`.
template <typename Fn>
Status call_plugin(HostContext& host, std::string_view plugin, std::string_view function, Fn&& fn) {
  PluginCallScope scope(plugin, function);
  host.clear_error();
  dscore_status code;
  try {
    code = std::forward<Fn>(fn)();
  } catch (const std::exception& e) {
    return exception_status(host, plugin, function, e.what());
  } catch (...) {
    return exception_status(host, plugin, function, nullptr);
  }
  return status_from_plugin(host, plugin, function, code);
}

// For functions that return a value and cannot fail (alignment(),
// first_iteration(), the entry symbol): the value, or the exception's Status.
template <typename T, typename Fn>
Result<T> call_plugin_value(HostContext& host, std::string_view plugin, std::string_view function,
                            Fn&& fn) {
  PluginCallScope scope(plugin, function);
  host.clear_error();
  try {
    return Result<T>(std::forward<Fn>(fn)());
  } catch (const std::exception& e) {
    return exception_status(host, plugin, function, e.what());
  } catch (...) {
    return exception_status(host, plugin, function, nullptr);
  }
}

// For void functions that must not fail (destroy, shutdown): an escaped
// exception is logged as an error, never propagated.
void log_call_failure(const Status& status);
template <typename Fn>
void call_plugin_void(HostContext& host, std::string_view plugin, std::string_view function,
                      Fn&& fn) {
  PluginCallScope scope(plugin, function);
  host.clear_error();
  try {
    std::forward<Fn>(fn)();
  } catch (const std::exception& e) {
    log_call_failure(exception_status(host, plugin, function, e.what()));
  } catch (...) {
    log_call_failure(exception_status(host, plugin, function, nullptr));
  }
}

}  // namespace dscore::plugin_host
