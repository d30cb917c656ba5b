// State of one NCCL comm-backend instance and what its collectives share:
// the CUDA/NCCL check helpers, the dtype and operator mapping, and the
// watchdog that waits on the communicator and a stream against the job's
// collective deadline (aborting the communicator when it passes).
#pragma once

#include <cuda_runtime.h>
#include <dscore/comm.h>
#include <nccl.h>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dscore::nccl_comm {

// A CUDA error becomes sdk::Error (UNAVAILABLE) naming the call and CUDA's text.
void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line);
#define DSCORE_CUDA_CHECK(call)                                                                    \
  do {                                                                                             \
    cudaError_t _rc = (call);                                                                      \
    if (_rc != cudaSuccess) ::dscore::nccl_comm::throw_cuda_error(_rc, #call, __FILE__, __LINE__); \
  } while (0)

struct NcclComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;    // the plugin's own stream (collectives given a NULL stream)
  float* barrier_scalar = nullptr;  // one device float for barrier()'s allreduce
  int rank = 0;
  int world = 1;
  int device = 0;
  int64_t timeout_ms = 300000;
  std::string aborted;  // non-empty once abort() ran or the watchdog aborted: why
  dscore_comm_counters counters{};
  // Grouped calls (comm.h): between ncclGroupStart and ncclGroupEnd, the
  // collectives issued so far (for group_end's error message).
  bool grouping = false;
  std::vector<const char*> group_ops;

  // Throws UNAVAILABLE when the communicator was aborted; makes this
  // instance's device current on the calling thread.
  void ready(const char* op);
  // After an NCCL call: ncclInProgress (the non-blocking communicator is
  // still enqueueing or connecting) is waited out against the deadline; any
  // other error aborts the communicator and throws naming `op` and the rank.
  void enqueued(ncclResult_t result, const char* op);
  // Wait until everything on `stream` completed, polling the stream and
  // the communicator's asynchronous error; on an error or past timeout_ms
  // aborts the communicator and throws UNAVAILABLE or DEADLINE_EXCEEDED.
  void wait_stream(cudaStream_t s, const char* op);
  // Abort the communicator (ncclCommAbort), remembering why.
  void abort_comm(const std::string& why);
};

// The NCCL element type for a reduction over `dtype` (INVALID_ARGUMENT for
// dtypes NCCL cannot reduce), and NCCL's operator for `op`.
ncclDataType_t reduction_type(dscore_dtype dtype, const char* op);
ncclRedOp_t nccl_op(dscore_reduce_op op, const char* name);

// Throws INVALID_ARGUMENT naming `op` unless `t` is a CUDA tensor of this
// instance's device with a valid dtype; a host tensor's message points to
// the mpi backend, which moves CPU tensors.
void check_cuda_tensor(const NcclComm& m, const dscore_tensor* t, const char* op);

}  // namespace dscore::nccl_comm
