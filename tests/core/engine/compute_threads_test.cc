// The rank's thread budget: where the number comes from, and that holding
// it really bounds TBB's pool.
#include "core/engine/compute_threads.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <oneapi/tbb/global_control.h>

#include <optional>
#include <string>

#include "core/engine/environment.h"
#include "tests/fakes/scoped_env.h"

namespace dscore {
namespace {

comm::JobEnv job_with_local_ranks(int ranks) {
  comm::JobEnv job;
  job.world_size = ranks;
  job.local_world_size = ranks;
  return job;
}

// OMP_NUM_THREADS as the program reads it (environment.h).
std::optional<std::string> omp_num_threads() { return read_engine_environment().omp_num_threads; }

int mask_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

TEST(ThreadBudget, AnExplicitCountWins) {
  ScopedEnv omp("OMP_NUM_THREADS", "3");
  auto budget = thread_budget(5, job_with_local_ranks(2), omp_num_threads());
  ASSERT_TRUE(budget.ok()) << budget.status().message();
  EXPECT_EQ(budget->threads, 5);
  EXPECT_EQ(budget->reason, "requested");
  EXPECT_FALSE(thread_budget(0, job_with_local_ranks(1), omp_num_threads()).ok());
}

TEST(ThreadBudget, OmpNumThreadsComesNextAndMustBeAWholeNumber) {
  ScopedEnv omp("OMP_NUM_THREADS", "3");
  auto budget = thread_budget(std::nullopt, job_with_local_ranks(2), omp_num_threads());
  ASSERT_TRUE(budget.ok()) << budget.status().message();
  EXPECT_EQ(budget->threads, 3);
  EXPECT_EQ(budget->reason, "OMP_NUM_THREADS");
  for (const char* bad : {"0", "-2", "2x", "four"}) {
    ScopedEnv malformed("OMP_NUM_THREADS", bad);
    auto refused = thread_budget(std::nullopt, job_with_local_ranks(1), omp_num_threads());
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find(std::string("OMP_NUM_THREADS='") + bad + "'"),
              std::string::npos)
        << refused.status().message();
  }
}

TEST(ThreadBudget, TheCpusAreSharedByTheRanksOnTheNode) {
  ScopedEnv omp("OMP_NUM_THREADS", std::nullopt);
  const int cpus = mask_cpus();
  for (int ranks : {1, 2, 3, 64}) {
    auto budget = thread_budget(std::nullopt, job_with_local_ranks(ranks), omp_num_threads());
    ASSERT_TRUE(budget.ok()) << budget.status().message();
    if (cpus < sysconf(_SC_NPROCESSORS_ONLN)) {
      EXPECT_EQ(budget->threads, cpus) << "a pinned process keeps its mask";
    } else {
      EXPECT_EQ(budget->threads, std::max(1, cpus / ranks)) << ranks << " ranks";
      EXPECT_NE(budget->reason.find(std::to_string(ranks) + " rank(s) on this node"),
                std::string::npos)
          << budget->reason;
    }
  }
}

TEST(ThreadBudget, AProcessPinnedToFewerCpusKeepsItsMask) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs 2 CPUs to pin to one";
  ScopedEnv omp("OMP_NUM_THREADS", std::nullopt);
  cpu_set_t old, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof old, &old), 0);
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &old)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  auto budget = thread_budget(std::nullopt, job_with_local_ranks(2), omp_num_threads());
  ASSERT_EQ(sched_setaffinity(0, sizeof old, &old), 0);
  ASSERT_TRUE(budget.ok()) << budget.status().message();
  EXPECT_EQ(budget->threads, 1);
  EXPECT_NE(budget->reason.find("affinity mask"), std::string::npos) << budget->reason;
}

TEST(ComputeThreads, BoundsTbbWhileAlive) {
  using tbb::global_control;
  const size_t before = global_control::active_value(global_control::max_allowed_parallelism);
  {
    ComputeThreads threads(1);
    EXPECT_EQ(global_control::active_value(global_control::max_allowed_parallelism), 1u);
  }
  EXPECT_EQ(global_control::active_value(global_control::max_allowed_parallelism), before);
}

}  // namespace
}  // namespace dscore
