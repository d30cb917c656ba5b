// The NCCL backend's shared helpers: error text, the deadline watchdog,
// and the mapping of dscore dtypes and operators onto NCCL's.
#include "nccl_comm.h"

#include <dscore/cpp/dtype.hpp>

#include <chrono>
#include <thread>

namespace dscore::nccl_comm {
namespace {

using sdk::Error;
using Clock = std::chrono::steady_clock;

std::string who(const NcclComm& m, const char* op) {
  return "nccl " + std::string(op) + " on rank " + std::to_string(m.rank) + " of " +
         std::to_string(m.world) + " (GPU " + std::to_string(m.device) + ")";
}

// Short pauses between polls: the watchdog must notice a finished
// collective quickly but not spin a core for minutes on a stuck peer.
void pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

}  // namespace

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  throw Error(DSCORE_UNAVAILABLE, std::string(call) + " failed at " + file + ":" +
                                      std::to_string(line) + ": " + cudaGetErrorString(code));
}

void NcclComm::ready(const char* op) {
  if (!aborted.empty())
    throw Error(DSCORE_UNAVAILABLE,
                who(*this, op) + ": the communicator was aborted earlier (" + aborted + ")");
  DSCORE_CUDA_CHECK(cudaSetDevice(device));
}

void NcclComm::abort_comm(const std::string& why) {
  if (aborted.empty()) aborted = why;
  if (comm != nullptr) {
    ncclCommAbort(comm);
    comm = nullptr;
  }
}

void NcclComm::enqueued(ncclResult_t result, const char* op) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  // A non-blocking call can return ncclSuccess with its group job still
  // linked to the communicator (ncclCommSplit does, seen with NCCL 2.28 on
  // an H100): asking for the state once completes a finished job, or says
  // it is in progress, before the next call finds it unfinished. (Not
  // between ncclGroupStart and ncclGroupEnd: nothing runs before the end.)
  if (result == ncclSuccess && comm != nullptr && !grouping &&
      ncclCommGetAsyncError(comm, &result) != ncclSuccess)
    result = ncclInternalError;
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      const std::string why = who(*this, op) + " was still in progress after " +
                              std::to_string(timeout_ms) +
                              " ms (comm.timeout_ms): a peer did not connect; the communicator "
                              "was aborted";
      abort_comm(why);
      throw Error(DSCORE_DEADLINE_EXCEEDED, why);
    }
    pause();
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) result = ncclInternalError;
  }
  if (result == ncclSuccess) return;
  std::string detail = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') detail += ": " + std::string(last);
  const std::string why = who(*this, op) + " failed: " + detail;
  abort_comm(why);
  throw Error(result == ncclInvalidArgument || result == ncclInvalidUsage ? DSCORE_INVALID_ARGUMENT
                                                                          : DSCORE_UNAVAILABLE,
              why);
}

void NcclComm::wait_stream(cudaStream_t s, const char* op) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      const std::string why = who(*this, op) + ": the stream failed: " + cudaGetErrorString(q);
      abort_comm(why);
      throw Error(DSCORE_UNAVAILABLE, why);
    }
    ncclResult_t async = ncclSuccess;
    if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(comm);
      const std::string detail = last != nullptr && *last != '\0' ? std::string(": ") + last : "";
      const std::string why = who(*this, op) + ": NCCL reported " + ncclGetErrorString(async) +
                              detail + " (a peer failed or left); the communicator was aborted";
      abort_comm(why);
      throw Error(DSCORE_UNAVAILABLE, why);
    }
    if (Clock::now() > deadline) {
      const std::string why = who(*this, op) + " did not complete within " +
                              std::to_string(timeout_ms) +
                              " ms (comm.timeout_ms): a rank did not arrive or a GPU hung; the "
                              "communicator was aborted";
      abort_comm(why);
      throw Error(DSCORE_DEADLINE_EXCEEDED, why);
    }
    pause();
  }
}

ncclDataType_t reduction_type(dscore_dtype dtype, const char* op) {
  switch (dtype) {
    case DSCORE_DTYPE_F32:
      return ncclFloat32;
    case DSCORE_DTYPE_F16:
      return ncclFloat16;
    case DSCORE_DTYPE_BF16:
      return ncclBfloat16;
    case DSCORE_DTYPE_F64:
      return ncclFloat64;
    case DSCORE_DTYPE_I8:
      return ncclInt8;
    case DSCORE_DTYPE_U8:
      return ncclUint8;
    case DSCORE_DTYPE_I32:
      return ncclInt32;
    case DSCORE_DTYPE_U32:
      return ncclUint32;
    case DSCORE_DTYPE_I64:
      return ncclInt64;
    case DSCORE_DTYPE_U64:
      return ncclUint64;
    default:
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "nccl " + std::string(op) + ": NCCL cannot reduce dtype " +
                      std::to_string(dtype) +
                      " (16-bit integers and bool have no NCCL reduction); convert to int32 or "
                      "a float type first");
  }
}

ncclRedOp_t nccl_op(dscore_reduce_op op, const char* name) {
  switch (op) {
    case DSCORE_REDUCE_SUM:
      return ncclSum;
    case DSCORE_REDUCE_PRODUCT:
      return ncclProd;
    case DSCORE_REDUCE_MIN:
      return ncclMin;
    case DSCORE_REDUCE_MAX:
      return ncclMax;
    case DSCORE_REDUCE_AVG:
      return ncclAvg;
    default:
      throw Error(DSCORE_INVALID_ARGUMENT, "nccl " + std::string(name) + ": reduce op " +
                                               std::to_string(op) +
                                               " is not SUM, PRODUCT, MIN, MAX or AVG");
  }
}

void check_cuda_tensor(const NcclComm& m, const dscore_tensor* t, const char* op) {
  if (t == nullptr || (t->data == nullptr && t->numel > 0))
    throw Error(DSCORE_INVALID_ARGUMENT, "nccl " + std::string(op) + ": NULL tensor");
  const std::string name = t->name != nullptr ? " '" + std::string(t->name) + "'" : "";
  if (t->device_type != DSCORE_DEVICE_CUDA)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "nccl " + std::string(op) + ": tensor" + name +
                    " is in host memory, but the nccl backend moves CUDA tensors only; use "
                    "\"comm\": {\"backend\": \"mpi\"} for CPU tensors");
  if (t->device_id != m.device)
    throw Error(DSCORE_INVALID_ARGUMENT, "nccl " + std::string(op) + ": tensor" + name +
                                             " is on GPU " + std::to_string(t->device_id) +
                                             " but this rank's communicator uses GPU " +
                                             std::to_string(m.device) + " (its local rank)");
  if (sdk::dtype_size(t->dtype) == 0)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "nccl " + std::string(op) + ": tensor" + name + " has an invalid dtype");
}

}  // namespace dscore::nccl_comm
