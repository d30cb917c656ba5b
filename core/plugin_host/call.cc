// Status mapping for calls into plugins (call.h): the plugin's code plus its
// host-side message, or a message saying what the plugin did wrong.
#include "core/plugin_host/call.h"

#include "core/base/logging.h"

namespace dscore::plugin_host {

Status status_from_plugin(HostContext& host, std::string_view plugin, std::string_view function,
                          dscore_status code) {
  auto last = host.take_error();
  if (code == DSCORE_OK) return Status::Ok();
  std::string prefix = std::string(plugin) + " " + std::string(function);
  if (code < 0 || code > DSCORE_STATUS_MAX) {
    std::string message = prefix + " returned an invalid status " + std::to_string(code) +
                          " (not a dscore_status code; a bug in the plugin)";
    if (last && !last->second.empty()) message += "; its message: " + last->second;
    return Status(DSCORE_INTERNAL, message);
  }
  std::string detail = last && !last->second.empty()
                           ? last->second
                           : "failed with " + status_code_name(code) + " and no message";
  return Status(code, prefix + ": " + detail);
}

Status exception_status(HostContext& host, std::string_view plugin, std::string_view function,
                        const char* what) {
  std::string message = std::string(plugin) + " threw a C++ exception out of " +
                        std::string(function) +
                        " across the C ABI; its exported functions must catch everything "
                        "(use dscore::sdk::guard from dscore/cpp/plugin.hpp)";
  if (what != nullptr) message += "; the exception said: " + std::string(what);
  host.clear_error();
  return Status(DSCORE_INTERNAL, message);
}

void log_call_failure(const Status& status) { log_error(status.message()); }

}  // namespace dscore::plugin_host
