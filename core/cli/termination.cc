// The SIGTERM report (termination.h). The handler may not allocate: it
// writes a fixed prefix, a fixed sentence and the communicator's fixed
// in-flight buffer, then re-raises with the default action.
#include "core/cli/termination.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace dscore::cli {
namespace {

// The one process-global of the CLI: a signal handler can reach nothing else.
std::atomic<const comm::Communicator*> g_reported{nullptr};
char g_prefix[48] = "[dscore] ";

void on_sigterm(int signo) {
  const comm::Communicator* c = g_reported.load();
  const char* where = c != nullptr ? c->in_flight() : "";
  const char* tail = where[0] != '\0' ? where : "computing (no collective in flight)";
  const char* mid =
      "stopped by SIGTERM: the launcher is ending the job (usually because another rank failed; "
      "see its message above). This rank was ";
  (void)!write(STDERR_FILENO, g_prefix, std::strlen(g_prefix));
  (void)!write(STDERR_FILENO, mid, std::strlen(mid));
  (void)!write(STDERR_FILENO, tail, std::strlen(tail));
  (void)!write(STDERR_FILENO, "\n", 1);
  std::signal(signo, SIG_DFL);
  raise(signo);
}

}  // namespace

void install_sigterm_report(const comm::Communicator& communicator) {
  std::snprintf(g_prefix, sizeof g_prefix, "[dscore rank %d] ", communicator.rank());
  g_reported.store(&communicator);
  std::signal(SIGTERM, &on_sigterm);
}

void uninstall_sigterm_report() {
  std::signal(SIGTERM, SIG_DFL);
  g_reported.store(nullptr);
}

}  // namespace dscore::cli
