#include "core/engine/compute_threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

namespace dscore {
namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 0;
}

}  // namespace

Result<ThreadBudget> thread_budget(std::optional<int> requested, const comm::JobEnv& job,
                                   const std::optional<std::string>& omp_num_threads) {
  if (requested) {
    if (*requested < 1) return invalid_argument("compute threads must be at least 1");
    return ThreadBudget{*requested, "requested"};
  }
  if (omp_num_threads && !omp_num_threads->empty()) {
    const std::string_view text(*omp_num_threads);
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 1)
      return invalid_argument("OMP_NUM_THREADS='" + std::string(text) +
                              "' is not a positive whole number of threads; unset it or set "
                              "e.g. OMP_NUM_THREADS=4");
    return ThreadBudget{n, "OMP_NUM_THREADS"};
  }
  const int mask = affinity_cpus(), online = online_cpus();
  if (mask <= 0) return ThreadBudget{1, "the CPU affinity mask could not be read"};
  if (online > 0 && mask < online)
    return ThreadBudget{mask, std::to_string(mask) + " of " + std::to_string(online) +
                                  " CPUs in this rank's affinity mask"};
  const int ranks = std::max(1, job.ranks_on_node());
  return ThreadBudget{
      std::max(1, mask / ranks),
      std::to_string(mask) + " CPUs / " + std::to_string(ranks) + " rank(s) on this node"};
}

}  // namespace dscore
