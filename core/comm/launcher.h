// `dscore run -n N`: start N local ranks by handing the command line to
// mpirun (an existing launcher; nothing home-made). Across machines users
// run mpirun or srun themselves.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::comm {

// Replaces this process with `mpirun -n <ranks> ... <this executable>
// <args...>` (mpirun from $DSCORE_MPIRUN, else PATH). The ranks get
// MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (where rank 0 serves the
// job's key-value store) unless the environment sets them already. Returns
// only on failure, with a message saying what to install or run instead.
Status exec_under_mpirun(int ranks, const std::vector<std::string>& args);

}  // namespace dscore::comm
