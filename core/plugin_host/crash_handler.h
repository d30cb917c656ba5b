// Fatal-signal reporting. install_crash_handler() catches SIGSEGV, SIGBUS,
// SIGFPE, SIGILL and SIGABRT (on an alternate stack, so a stack overflow is
// reported too), writes one line naming the plugin function that was
// running on the crashing thread (or "in dscore itself"), and re-raises the
// signal with the previous action, so the process still dies of it (core
// dumps, exit status and sanitizer reports stay as they were).
#pragma once

#include <cstddef>
#include <string_view>

namespace dscore::plugin_host {

// Idempotent; thread-safe. The alternate stack covers the calling thread.
void install_crash_handler();

// Marks the calling thread as running `function` of `plugin` (its display
// name) until destroyed; nests (the outer call is restored). The record is a
// fixed-size thread-local buffer, so the signal handler never allocates.
// Long names are truncated.
class PluginCallScope {
 public:
  PluginCallScope(std::string_view plugin, std::string_view function);
  ~PluginCallScope();
  PluginCallScope(const PluginCallScope&) = delete;
  PluginCallScope& operator=(const PluginCallScope&) = delete;

  static constexpr size_t kRecordSize = 768;

 private:
  char saved_[kRecordSize];
  bool saved_active_;
};

// The line the handler would write for `signal` on this thread now (for
// tests): "dscore: fatal signal SIGSEGV while running step of optimizer
// 'x' (/path)\n".
std::string_view crash_message_for_test(int signal, char* buffer, size_t size);

}  // namespace dscore::plugin_host
