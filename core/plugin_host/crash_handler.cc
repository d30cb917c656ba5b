// The fatal-signal handler and the per-thread "current plugin call" record
// it reports. Everything the handler touches is static or a trivially
// constructed thread_local, and it writes with write(2) only: no malloc, no
// locks, no stdio (async-signal-safe).
#include "core/plugin_host/crash_handler.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

namespace dscore::plugin_host {
namespace {

// Trivial type: a thread_local of it needs no constructor and no TLS wrapper,
// so reading it from the handler is safe.
struct CallRecord {
  bool active;
  char text[PluginCallScope::kRecordSize];  // "<function> of <plugin display>", NUL-terminated
};
thread_local CallRecord t_record;

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[NSIG];
std::once_flag g_install_once;
// The installing thread's alternate stack: large enough for the handler
// after a stack overflow. Other threads run the handler on their own stack.
alignas(16) char g_alt_stack[64 * 1024];

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "signal";
  }
}

// Appends `s` at buf[*pos], always leaving room for the terminating NUL.
void append(char* buf, size_t size, size_t* pos, const char* s) {
  while (*s != '\0' && *pos + 1 < size) buf[(*pos)++] = *s++;
  buf[*pos] = '\0';
}

size_t format_message(int sig, char* buf, size_t size) {
  size_t pos = 0;
  if (size == 0) return 0;
  buf[0] = '\0';
  append(buf, size, &pos, "dscore: fatal signal ");
  append(buf, size, &pos, signal_name(sig));
  if (t_record.active) {
    append(buf, size, &pos, " while running ");
    append(buf, size, &pos, t_record.text);
  } else {
    append(buf, size, &pos, " in dscore itself");
  }
  append(buf, size, &pos, "\n");
  return pos;
}

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n <= 0) return;  // nothing better to do inside a signal handler
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void handle_fatal_signal(int sig, siginfo_t*, void*) {
  char buf[PluginCallScope::kRecordSize + 96];
  size_t n = format_message(sig, buf, sizeof buf);
  write_all(STDERR_FILENO, buf, n);
  // Hand the signal to whoever had it before (the default action: die with
  // this signal; or a sanitizer's handler). It is blocked while we run, so
  // raise() leaves it pending and it is delivered when we return.
  struct sigaction previous = g_previous[sig];
  if (previous.sa_handler == SIG_IGN) previous.sa_handler = SIG_DFL;  // a fault cannot be ignored
  sigaction(sig, &previous, nullptr);
  raise(sig);
}

void install() {
  stack_t stack{};
  stack.ss_sp = g_alt_stack;
  stack.ss_size = sizeof g_alt_stack;
  stack.ss_flags = 0;
  sigaltstack(&stack, nullptr);

  struct sigaction action {};
  action.sa_sigaction = handle_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int sig : kSignals) sigaction(sig, &action, &g_previous[sig]);
}

}  // namespace

void install_crash_handler() { std::call_once(g_install_once, install); }

PluginCallScope::PluginCallScope(std::string_view plugin, std::string_view function) {
  std::memcpy(saved_, t_record.text, kRecordSize);
  saved_active_ = t_record.active;
  // Build "<function> of <plugin>" in place, truncating long names.
  char* out = t_record.text;
  size_t pos = 0;
  auto put = [&](std::string_view s) {
    size_t n = std::min(s.size(), kRecordSize - 1 - pos);
    std::memcpy(out + pos, s.data(), n);
    pos += n;
  };
  // Not active while the text is half-written: a signal now reports "in
  // dscore itself" rather than garbage.
  t_record.active = false;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  put(function);
  put(" of ");
  put(plugin);
  out[pos] = '\0';
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_record.active = true;
}

PluginCallScope::~PluginCallScope() {
  t_record.active = false;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(t_record.text, saved_, kRecordSize);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_record.active = saved_active_;
}

std::string_view crash_message_for_test(int signal, char* buffer, size_t size) {
  return std::string_view(buffer, format_message(signal, buffer, size));
}

}  // namespace dscore::plugin_host
