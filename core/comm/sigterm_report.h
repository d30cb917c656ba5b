// What a rank says when the launcher ends it with SIGTERM (mpirun does so
// to every rank once one has failed): which collective it was in, so the
// user can tell the rank that failed from the ranks that were stopped.
// Process-wide by nature (a signal handler): the library never installs it
// by itself; a program that owns its process (`dscore run`, a test worker)
// asks for it.
#pragma once

#include <string>

#include "core/comm/communicator.h"

namespace dscore::comm {

// Installs the SIGTERM handler for this process; it reads `communicator`'s
// in-flight record. Call once the communicator exists; `communicator` must
// outlive the handler (call uninstall_sigterm_report before it dies).
// `role`, when not empty, says what the rank does ("pipeline stage 1 of 2")
// in the report.
void install_sigterm_report(const Communicator& communicator, const std::string& role = "");
void uninstall_sigterm_report();

// A rank started by a launcher (mpirun, srun) ends with it: when the
// process that started this one dies, even by SIGKILL, this process gets
// SIGTERM (Linux's parent-death signal) instead of training on alone and
// writing checkpoints nobody waits for. With the report installed it says
// the launcher died. Call once, early, in a rank of a multi-rank job.
void end_with_launcher();

}  // namespace dscore::comm
