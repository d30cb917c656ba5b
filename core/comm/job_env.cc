#include "core/comm/job_env.h"

#include <cstdio>
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
  const char* local_size;  // ranks on this node
};

constexpr Scheme kSchemes[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

// Slurm's tasks on node `node` from SLURM_TASKS_PER_NODE ("2(x3),1": three
// nodes of 2 tasks, then one of 1); 0 when unset or not in that form.
int slurm_tasks_on_node(int node) {
  const char* text = std::getenv("SLURM_TASKS_PER_NODE");
  if (text == nullptr) return 0;
  const std::string list = text;
  size_t pos = 0;
  int first = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    int tasks = 0, repeat = 1;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d(x%d)%c", &tasks, &repeat, &tail) < 1 || tasks < 0 ||
        repeat < 1)
      return 0;
    if (node < first + repeat) return tasks;
    first += repeat;
    pos = end + 1;
  }
  return 0;
}

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
    if (s.local_size != nullptr) {
      DSCORE_ASSIGN_OR_RETURN(std::optional<int> local_size, env_int(s.local_size));
      env.local_world_size = local_size.value_or(0);
    } else {
      DSCORE_ASSIGN_OR_RETURN(std::optional<int> node, env_int("SLURM_NODEID"));
      env.local_world_size = slurm_tasks_on_node(node.value_or(0));
    }
    env.launcher = s.launcher;
    return env;
  }
  JobEnv alone;
  alone.local_world_size = 1;
  return alone;
}

}  // namespace dscore::comm
