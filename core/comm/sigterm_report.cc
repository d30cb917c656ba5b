// The SIGTERM report (sigterm_report.h). The handler may not lock or allocate:
// it reads the communicator's lock-free in-flight record, formats it with
// its own digit writer, writes with write(2), then re-raises with the
// default action.
#include "core/comm/sigterm_report.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace dscore::comm {
namespace {

// Process-global because a signal handler can reach nothing else.
std::atomic<const Communicator*> g_reported{nullptr};
char g_prefix[48] = "[dscore] ";
char g_role[64] = "";              // " (pipeline stage 1 of 2)", or empty
std::atomic<pid_t> g_launcher{0};  // the parent end_with_launcher() saw; 0: not watched

// Async-signal-safe: decimal digits of `value` into `out`, returns the end.
char* append_decimal(char* out, uint64_t value) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* append_text(char* out, const char* text) {
  while (*text != '\0') *out++ = *text++;
  return out;
}

void on_sigterm(int signo) {
  const Communicator* c = g_reported.load();
  const Communicator::InFlight now = c != nullptr ? c->in_flight() : Communicator::InFlight{};
  char where[160];
  const char* tail = "computing (no collective in flight)";
  if (now.op != nullptr) {  // "in <op> #<sequence> (<elements> elements)"; op is a short literal
    char* end = append_text(append_text(where, "in "), now.op);
    end = append_decimal(append_text(end, " #"), now.sequence);
    end = append_text(append_decimal(append_text(end, " ("), now.elements), " elements)");
    *end = '\0';
    tail = where;
  }
  const pid_t launcher = g_launcher.load();
  const char* mid =
      launcher != 0 && getppid() != launcher
          ? "stopped: the launcher that started this rank died (killed?), so this rank ends "
            "with it. This rank"
          : "stopped by SIGTERM: the launcher is ending the job (usually because another rank "
            "failed; see its message above). This rank";
  (void)!write(STDERR_FILENO, g_prefix, std::strlen(g_prefix));
  (void)!write(STDERR_FILENO, mid, std::strlen(mid));
  (void)!write(STDERR_FILENO, g_role, std::strlen(g_role));
  (void)!write(STDERR_FILENO, " was ", 5);
  (void)!write(STDERR_FILENO, tail, std::strlen(tail));
  (void)!write(STDERR_FILENO, "\n", 1);
  std::signal(signo, SIG_DFL);
  raise(signo);
}

}  // namespace

void install_sigterm_report(const Communicator& communicator, const std::string& role) {
  std::snprintf(g_prefix, sizeof g_prefix, "[dscore rank %d] ", communicator.rank());
  if (role.empty())
    g_role[0] = '\0';
  else
    std::snprintf(g_role, sizeof g_role, " (%s)", role.c_str());
  g_reported.store(&communicator);
  std::signal(SIGTERM, &on_sigterm);
}

void end_with_launcher() {
  const pid_t parent = getppid();
  g_launcher.store(parent);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The launcher may have died before the call: then no signal comes.
  if (getppid() != parent) raise(SIGTERM);
}

void uninstall_sigterm_report() {
  std::signal(SIGTERM, SIG_DFL);
  g_reported.store(nullptr);
}

}  // namespace dscore::comm
