// Runs under mpirun: every rank publishes a binary value through the job's
// key-value store (core/comm/job_store.h: rank 0 serves it at
// MASTER_ADDR:MASTER_PORT) and reads every other rank's. Prints "rank R read
// W keys" and exits 0, or prints the store's error and exits 1.
#include <cstdio>
#include <string>

#include "core/comm/job_env.h"
#include "core/comm/job_store.h"

namespace {

std::string value_of(int rank) {
  std::string v(128, '\0');  // the size of an NCCL unique id, NULs included
  for (size_t i = 0; i < v.size(); i += 3) v[i] = static_cast<char>(rank * 31 + i);
  return v;
}

int fail(const dscore::Status& st) {
  std::fprintf(stderr, "kv_worker: %s\n", st.message().c_str());
  return 1;
}

}  // namespace

int main() {
  using namespace dscore;
  Result<comm::JobEnv> job = comm::detect_job_env();
  if (!job.ok()) return fail(job.status());
  auto kv = comm::make_job_kv(*job, 60000);
  if (kv == nullptr) return fail(Status(DSCORE_INTERNAL, "a job of one rank has no job store"));
  const int rank = job->rank, world = job->world_size;
  if (Status st = kv->set("rank." + std::to_string(rank), value_of(rank)); !st.ok())
    return fail(st);
  int read = 0;
  for (int peer = 0; peer < world; ++peer) {
    Result<std::string> v = kv->get("rank." + std::to_string(peer), 60000);
    if (!v.ok()) return fail(v.status());
    if (*v != value_of(peer))
      return fail(Status(DSCORE_DATA_LOSS, "rank " + std::to_string(peer) + "'s value differs"));
    ++read;
  }
  // Rank 0's server must outlive the others' reads.
  if (Status st = kv->set("done." + std::to_string(rank), ""); !st.ok()) return fail(st);
  if (rank == 0)
    for (int peer = 0; peer < world; ++peer)
      if (Result<std::string> v = kv->get("done." + std::to_string(peer), 60000); !v.ok())
        return fail(v.status());
  std::printf("rank %d read %d keys\n", rank, read);
  return 0;
}
