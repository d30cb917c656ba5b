// Runs under mpirun, one rank per GPU: the shared collective checks
// (tests/multirank/collective_checks.h) on the "nccl" comm plugin through
// GPU memory. Rank 0's NCCL unique id travels through the job's key-value
// store (core/comm/job_store.h: rank 0 serves it at MASTER_ADDR:MASTER_PORT,
// which the test passes with mpirun -x). Prints "OK <checks>" on rank 0
// when every rank passed, else the first mismatches, and exits non-zero.
#include <cstdio>

#include "core/comm/job_env.h"
#include "core/comm/job_store.h"
#include "tests/plugins/comm/nccl/device_comm.h"

int main() {
  using namespace dscore::testing;
  auto env = dscore::comm::detect_job_env();
  auto registry =
      dscore::plugin_host::PluginRegistry::open({{DSCORE_BUILD_PLUGIN_DIR}, {true}, {"test"}});
  if (!env.ok() || !registry.ok()) return 2;
  if (cudaSetDevice(env->local_rank) != cudaSuccess) return 2;
  NcclJob job;
  job.rank = env->rank;
  job.world_size = env->world_size;
  job.local_rank = env->local_rank;
  job.kv = dscore::comm::make_job_kv(*env, job.timeout_ms);
  auto instance = create_nccl(**registry, job);
  if (!instance.ok()) {
    std::fprintf(stderr, "%s\n", instance.status().message().c_str());
    return 2;
  }
  DeviceComm c(std::move(*instance), env->rank, env->world_size);
  CheckLog log(c.rank());
  run_collective_checks(c, CheckOptions{1e-6f}, &log);
  run_grouped_checks(c, 1e-6f, &log);
  return agree_and_report(c, log);
}
