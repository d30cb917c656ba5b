// Which key-value store a job's plugins bootstrap through (host->kv_set /
// kv_get). One process holding every rank keeps the host's in-process store;
// ranks in separate processes share the TCP store (tcp_kv.h) that rank 0
// serves at MASTER_ADDR and MASTER_PORT from the environment (torchrun sets
// both; `dscore run -n` sets them for its ranks; under mpirun or srun the
// user exports them). DSCORE_KV_PORT, when set, is the store's port instead
// of MASTER_PORT; under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=
// True: torch's own TCPStore already listens on MASTER_PORT) the default is
// MASTER_PORT + 1.
//
// The store opens on the first kv_set/kv_get of any plugin on that rank, not
// before: a job whose backend needs no store (mpi) neither needs the
// variables nor binds a port. Without them, that first call fails with a
// message naming both variables and how to set them for the job's launcher.
#pragma once

#include <cstdint>
#include <memory>

#include "core/comm/job_env.h"
#include "core/plugin_host/host_context.h"

namespace dscore::comm {

// The store for a job of several processes; nullptr when `job` has one rank
// (the caller keeps the in-process store). `timeout_ms` bounds how long a
// rank waits for rank 0's server to come up (the job's comm.timeout_ms).
// Engines of one process with the same job share one store.
std::shared_ptr<plugin_host::KvBackend> make_job_kv(const JobEnv& job, int64_t timeout_ms);

}  // namespace dscore::comm
