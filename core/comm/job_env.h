// Who this process is in the job, from the launcher's environment: mpirun
// (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_*), srun (SLURM_*), or
// torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK). No launcher: one rank.
#pragma once

#include <string>

#include "core/base/status.h"

namespace dscore::comm {

struct JobEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // Ranks on this node (sharing its RAM and disk); 0 when the launcher does
  // not say: then every rank is taken to be on this node.
  int local_world_size = 0;
  int ranks_on_node() const { return local_world_size > 0 ? local_world_size : world_size; }
  std::string launcher = "none";  // "mpirun", "pmi", "srun", "torchrun", "none"
};

// Fails with a message naming the variables when they are malformed or
// inconsistent (rank outside the world, a world without a rank).
Result<JobEnv> detect_job_env();

}  // namespace dscore::comm
