// Runs under mpirun, one rank per GPU: the shared collective checks
// (tests/multirank/collective_checks.h) on the "nccl" comm plugin through
// GPU memory. Rank 0's NCCL unique id travels through the job's key-value
// store (core/comm/job_store.h: rank 0 serves it at MASTER_ADDR:MASTER_PORT,
// which the test passes with mpirun -x). Prints "OK <checks>" on rank 0
// when every rank passed, else the first mismatches, and exits non-zero.
//
// With --rank-1-dies: after a first barrier rank 1's process exits at once
// (its communicator left open), and rank 0 calls barrier again, prints
// "ENDED <code> <message>" and exits 0 when that call failed with
// UNAVAILABLE or DEADLINE_EXCEEDED (the job's timeout is 5 s).
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/comm/job_env.h"
#include "core/comm/job_store.h"
#include "tests/plugins/comm/nccl/device_comm.h"

namespace {

int rank_1_dies(dscore::testing::DeviceComm& c) {
  if (!c.barrier().ok()) return 3;
  if (c.rank() == 1) _exit(0);
  const dscore::Status st = c.barrier();
  std::printf("ENDED %d %s\n", static_cast<int>(st.code()), st.message().c_str());
  return st.code() == DSCORE_UNAVAILABLE || st.code() == DSCORE_DEADLINE_EXCEEDED ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool dies = argc > 1 && std::strcmp(argv[1], "--rank-1-dies") == 0;
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
  if (dies) job.timeout_ms = 5000;
  job.kv = dscore::comm::make_job_kv(*env, job.timeout_ms);
  auto instance = create_nccl(**registry, job);
  if (!instance.ok()) {
    std::fprintf(stderr, "%s\n", instance.status().message().c_str());
    return 2;
  }
  DeviceComm c(std::move(*instance), env->rank, env->world_size);
  if (dies) return rank_1_dies(c);
  CheckLog log(c.rank());
  run_collective_checks(c, CheckOptions{1e-6f}, &log);
  run_grouped_checks(c, 1e-6f, &log);
  return agree_and_report(c, log);
}
