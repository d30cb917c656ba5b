// How many threads a rank computes with: the size of TBB's pool, which the
// engine and every plugin's kernels share in one process. Ranks on one node
// would otherwise each start a pool of every core (plus a comm thread) and
// fight over the cores, as PyTorch ranks would without torchrun's
// OMP_NUM_THREADS. The budget, first that applies:
//   1. an explicit count (`dscore run --threads N`, InitializeOptions);
//   2. OMP_NUM_THREADS, as PyTorch reads it (torchrun sets it to 1; the
//      program reads it: environment.h);
//   3. the CPUs this process may run on (its affinity mask), divided among
//      the ranks on this node, at least 1 -- unless the launcher already
//      pinned the process to fewer CPUs than the machine has (mpirun
//      --bind-to core), in which case the mask is the rank's share.
#pragma once

#include <oneapi/tbb/global_control.h>

#include <optional>
#include <string>

#include "core/base/status.h"
#include "core/comm/job_env.h"

namespace dscore {

struct ThreadBudget {
  int threads = 1;
  std::string reason;  // for the log: where the number comes from
};

// `requested`: an explicit count (> 0), or nullopt for 2. and 3. above;
// `omp_num_threads`: OMP_NUM_THREADS's value, if set. Fails on a malformed
// OMP_NUM_THREADS, naming it.
Result<ThreadBudget> thread_budget(std::optional<int> requested, const comm::JobEnv& job,
                                   const std::optional<std::string>& omp_num_threads);

// Holds TBB's pool at `threads` (tbb::global_control) while alive. With
// several alive in one process (ranks as threads) the smallest wins.
class ComputeThreads {
 public:
  explicit ComputeThreads(int threads)
      : threads_(threads),
        control_(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads)) {}
  int threads() const { return threads_; }

 private:
  int threads_;
  tbb::global_control control_;
};

}  // namespace dscore
