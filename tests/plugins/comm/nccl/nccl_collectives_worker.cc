// Runs under mpirun, one rank per GPU: the shared collective checks
// (tests/multirank/collective_checks.h) on the "nccl" comm plugin through
// GPU memory. argv[1] is a folder every rank can reach: the key-value store
// that carries rank 0's NCCL unique id (DirectoryKv). Prints "OK <checks>"
// on rank 0 when every rank passed, else the first mismatches, and exits
// non-zero.
#include <cstdio>

#include "core/comm/job_env.h"
#include "tests/plugins/comm/nccl/device_comm.h"

int main(int argc, char** argv) {
  using namespace dscore::testing;
  if (argc != 2) {
    std::fprintf(stderr, "usage: nccl_collectives_worker <shared folder>\n");
    return 2;
  }
  auto env = dscore::comm::detect_job_env();
  auto registry =
      dscore::plugin_host::PluginRegistry::open({{DSCORE_BUILD_PLUGIN_DIR}, {true}, {"test"}});
  if (!env.ok() || !registry.ok()) return 2;
  if (cudaSetDevice(env->local_rank) != cudaSuccess) return 2;
  NcclJob job;
  job.rank = env->rank;
  job.world_size = env->world_size;
  job.local_rank = env->local_rank;
  job.kv = std::make_shared<DirectoryKv>(argv[1]);
  auto instance = create_nccl(**registry, job);
  if (!instance.ok()) {
    std::fprintf(stderr, "%s\n", instance.status().message().c_str());
    return 2;
  }
  DeviceComm c(std::move(*instance), env->rank, env->world_size);
  CheckLog log(c.rank());
  run_collective_checks(c, CheckOptions{1e-6f}, &log);
  return agree_and_report(c, log);
}
