#include "core/comm/job_env.h"

#include <cstdlib>
#include <optional>

namespace dscore::comm {
namespace {

// A non-negative integer environment variable, or nullopt when unset.
Result<std::optional<int>> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::optional<int>();
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1 << 24)
    return invalid_argument(std::string("environment variable ") + name + "=\"" + text +
                            "\" is not a rank or world size");
  return std::optional<int>(static_cast<int>(value));
}

struct Scheme {
  const char* launcher;
  const char* rank;
  const char* world;
  const char* local_rank;
};

constexpr Scheme kSchemes[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

}  // namespace

Result<JobEnv> detect_job_env() {
  for (const Scheme& s : kSchemes) {
    DSCORE_ASSIGN_OR_RETURN(std::optional<int> rank, env_int(s.rank));
    DSCORE_ASSIGN_OR_RETURN(std::optional<int> world, env_int(s.world));
    if (!rank && !world) continue;
    if (!rank || !world)
      return invalid_argument(std::string("the launcher environment sets ") +
                              (rank ? s.rank : s.world) + " but not " + (rank ? s.world : s.rank));
    if (*world < 1 || *rank >= *world)
      return invalid_argument(std::string(s.rank) + "=" + std::to_string(*rank) +
                              " is not a rank of " + s.world + "=" + std::to_string(*world));
    DSCORE_ASSIGN_OR_RETURN(std::optional<int> local, env_int(s.local_rank));
    JobEnv env;
    env.rank = *rank;
    env.world_size = *world;
    env.local_rank = local.value_or(0);
    env.launcher = s.launcher;
    return env;
  }
  return JobEnv{};
}

}  // namespace dscore::comm
