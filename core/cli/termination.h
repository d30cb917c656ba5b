// What a rank says when the launcher ends it with SIGTERM (mpirun does so
// to every rank once one has failed): which collective it was in, so the
// user can tell the rank that failed from the ranks that were stopped.
// Process-wide by nature (a signal handler), so it lives in the CLI, never
// in the libraries an embedding program links.
#pragma once

#include "core/comm/communicator.h"

namespace dscore::cli {

// Installs the SIGTERM handler for this process; it reads `communicator`'s
// in-flight record. Call once the communicator exists; `communicator` must
// outlive the handler (call uninstall_sigterm_report before it dies).
void install_sigterm_report(const comm::Communicator& communicator);
void uninstall_sigterm_report();

}  // namespace dscore::cli
