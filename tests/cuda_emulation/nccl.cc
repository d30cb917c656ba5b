// NCCL for the CUDA emulation: communicators of one rank (the emulation has
// one device, so every multi-GPU case skips). A communicator of more ranks
// never connects, as when the peers never come: a non-blocking one stays
// in progress until it is aborted, a blocking one is refused. On one rank
// each collective is a copy: a sum, product, minimum, maximum or average over one rank is its
// input. Point-to-point calls to rank 0 itself pair a send with a receive in
// order, at once outside a group and at ncclGroupEnd inside one. Work runs
// when it is enqueued, as every stream of the emulation does.
#include <nccl.h>

#include <cstring>
#include <deque>
#include <mutex>

namespace {

struct Transfer {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;
};

int g_group_depth = 0;

}  // namespace

struct ncclComm {
  int rank = 0;
  bool aborted = false;
  bool connecting = false;            // more than one rank: the peers never connect
  std::deque<Transfer> sends, recvs;  // point-to-point calls not yet paired
  ncclResult_t pair() {
    while (!sends.empty() && !recvs.empty()) {
      const Transfer s = sends.front(), r = recvs.front();
      sends.pop_front();
      recvs.pop_front();
      if (s.bytes != r.bytes) return ncclInvalidUsage;
      if (s.bytes > 0) std::memmove(r.recv, s.send, s.bytes);
    }
    return ncclSuccess;
  }
};

namespace {

std::mutex g_mutex;                // the group depth and the comms' queues
std::deque<ncclComm*> g_in_group;  // comms with point-to-point calls in the open group

size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

ncclResult_t copy(const void* send, void* recv, size_t count, ncclDataType_t type,
                  ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->aborted || comm->connecting) return ncclInvalidUsage;
  const size_t bytes = element_bytes(type);
  if (bytes == 0) return ncclInvalidArgument;
  if (count > 0 && send != recv) std::memmove(recv, send, count * bytes);
  return ncclSuccess;
}

ncclResult_t point_to_point(Transfer t, bool is_send, int peer, ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (peer != 0) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(g_mutex);
  (is_send ? comm->sends : comm->recvs).push_back(t);
  if (g_group_depth > 0) {
    g_in_group.push_back(comm);
    return ncclSuccess;
  }
  return comm->pair();
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, "dscore-emulation", 16);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                    ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  *comm = new ncclComm;
  (*comm)->rank = rank;
  if (nranks == 1) return ncclSuccess;
  if (config == nullptr || config->blocking != 0) {  // would wait forever
    delete *comm;
    *comm = nullptr;
    return ncclInvalidUsage;
  }
  (*comm)->connecting = true;
  return ncclInProgress;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm == nullptr ? ncclInvalidArgument : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm != nullptr) comm->aborted = true;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr) return ncclInvalidArgument;
  *error = comm->connecting ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr) return ncclInvalidArgument;
  *count = 1;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int, ncclComm_t* newcomm, ncclConfig_t*) {
  if (comm == nullptr) return ncclInvalidArgument;
  *newcomm = color == NCCL_SPLIT_NOCOLOR ? nullptr : new ncclComm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  for (ncclComm* comm : g_in_group)
    if (const ncclResult_t r = comm->pair(); r != ncclSuccess) result = r;
  g_in_group.clear();
  return result;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t, ncclComm_t comm, cudaStream_t) {
  return copy(send, recv, count, type, comm);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t, int root, ncclComm_t comm, cudaStream_t) {
  return root != 0 ? ncclInvalidArgument : copy(send, recv, count, type, comm);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t) {
  return root != 0 ? ncclInvalidArgument : copy(send, recv, count, type, comm);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t) {
  return copy(send, recv, count, type, comm);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t) {
  return copy(send, recv, count, type, comm);
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t) {
  return point_to_point({send, nullptr, count * element_bytes(type)}, true, peer, comm);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t) {
  return point_to_point({nullptr, recv, count * element_bytes(type)}, false, peer, comm);
}

const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "an error of the NCCL emulation";
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

}  // extern "C"
