// Starting the ranks of a job through an existing launcher (nothing
// home-made): `dscore run -n N` hands its command line to a local mpirun;
// `dscore run --hostfile F` maps DeepSpeed's hostfile and flags onto mpirun
// (--host list) or, inside a Slurm allocation, srun (node list). Either way
// the ranks get MASTER_ADDR / MASTER_PORT (where rank 0 serves the job's
// key-value store, job_store.h), DSCORE_JOB_TOKEN (the store's secret: the
// caller's, else a random one; shell_line prints it as <secret>) and the
// caller's DSCORE_* and OMP_NUM_THREADS settings.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/comm/hostfile.h"

namespace dscore::comm {

// A launcher's command line and the environment it is started with.
struct LaunchCommand {
  std::string launcher;  // "openmpi" or "slurm"
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set before it starts
};

// `mpirun -n <ranks> ... <this executable> <args...>` on this host (mpirun
// from $DSCORE_MPIRUN, else PATH), MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT unless the environment sets them.
Result<LaunchCommand> local_launch(int ranks, const std::vector<std::string>& args);
// local_launch, then exec_launch: replaces this process; returns only on failure.
Status exec_under_mpirun(int ranks, const std::vector<std::string>& args);

struct HostLaunch {
  std::vector<HostSlots> hosts;  // from the hostfile, filtered
  std::string launcher =
      "auto";               // auto (srun inside a Slurm allocation, else mpirun), openmpi, slurm
  std::string master_addr;  // "" = the first host
  int master_port = 0;      // 0 = $MASTER_PORT, else DeepSpeed's 29500 (a free one on localhost)
  std::vector<std::string> args;  // each rank's `dscore` arguments
};

// The command that starts `launch`'s ranks; errors name the flag or host
// that cannot be honoured (a launcher that is not offered, srun outside an
// allocation, uneven slots under srun, slot lists mpirun cannot place).
Result<LaunchCommand> host_launch(const HostLaunch& launch);

// The command as one shell line (environment assignments first), for --dry-run.
std::string shell_line(const LaunchCommand& command);

// Sets the command's environment and replaces this process with it. Returns
// only on failure, with a message saying what to install or run instead.
Status exec_launch(const LaunchCommand& command);

}  // namespace dscore::comm
