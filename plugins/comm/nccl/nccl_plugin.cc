// The "nccl" comm backend: CUDA tensors, one GPU per rank (the rank's
// local rank), collectives enqueued on the caller's CUDA stream. The
// communicator is non-blocking (ncclConfig_t.blocking = 0), so its
// creation and every collective can be timed out: a watchdog polls the
// stream and ncclCommGetAsyncError against comm.timeout_ms and aborts the
// communicator when a peer does not arrive.
//
// Bootstrap: rank 0 makes the NCCL unique id and publishes it in the job's
// key-value store (host->kv_set on the instance's context); the other ranks
// read it (host->kv_get, waiting up to timeout_ms). The n-th nccl
// communicator a rank creates meets under key n, as every rank creates its
// communicators in the same order (comm.h ORDERING). dscore's host shares
// that store between the ranks of one process (ranks as threads), and for
// ranks in separate processes serves it over TCP from rank 0 at
// MASTER_ADDR:MASTER_PORT (see docs/gpu.md).
//
// GROUPS OF COLLECTIVES (comm.h group_start/group_end, ABI 1.2). NCCL fuses
// the calls made between ncclGroupStart and ncclGroupEnd on one thread into
// one launch: group_start is ncclGroupStart, every collective inside returns
// once recorded (nothing is launched yet, so nothing may wait on the stream:
// barrier and point-to-point calls are refused inside a group), and
// group_end is ncclGroupEnd followed by NcclComm::enqueued() (non-blocking
// communicators report ncclInProgress while they connect). NCCL reports a
// failure for the group as a whole, so the message lists the group's ops.
#include <dscore/comm.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <dscore/cpp/instance.hpp>

#include "collectives.h"
#include "nccl_comm.h"

namespace dscore::nccl_comm {
namespace {

using sdk::Error;

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// The oldest NCCL with every call used here (ncclCommSplit came in 2.18).
// The library is the machine's (linked by soname): an older one would fail
// at the first missing symbol, mid-job, so it is refused at creation.
constexpr int kOldestNccl = 21800;

void check_nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version < kOldestNccl)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "nccl: the loaded libnccl.so.2 is version " + std::to_string(version) +
                    ", older than 2.18 (21800), which this plugin needs (ncclCommSplit); put a "
                    "newer NCCL (PyTorch's site-packages nvidia/nccl/lib) first on "
                    "LD_LIBRARY_PATH");
}

int visible_devices(int rank) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "nccl: rank " + std::to_string(rank) + " sees no CUDA device (" +
                    (e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                                      : std::string("cudaGetDeviceCount returned 0")) +
                    "). The nccl backend moves GPU tensors: run on a machine with an NVIDIA GPU "
                    "and its driver (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use "
                    "\"comm\": {\"backend\": \"mpi\"} (or \"local\" for one rank) for CPU "
                    "training");
  return count;
}

class NcclBackend : public sdk::Instance {
 public:
  // Collective: every rank of the job.
  NcclBackend(sdk::HostRef host, const sdk::Params& params) : Instance(host) {
    const dscore_create_args* args = params.args();
    m_.timeout_ms = params.integer("timeout_ms");
    m_.rank = args->rank;
    m_.world = args->world_size;
    check_nccl_version();
    const int devices = visible_devices(m_.rank);
    if (args->local_rank < 0 || args->local_rank >= devices)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "nccl: rank " + std::to_string(m_.rank) + " has local rank " +
                      std::to_string(args->local_rank) + " but this machine shows " +
                      std::to_string(devices) +
                      " CUDA device(s): start at most one rank per GPU on each machine (or widen "
                      "CUDA_VISIBLE_DEVICES)");
    m_.device = args->local_rank;
    DSCORE_CUDA_CHECK(cudaSetDevice(m_.device));
    try {
      open_stream();
      const ncclUniqueId id = exchange_id();
      ncclConfig_t config = non_blocking_config();
      m_.enqueued(ncclCommInitRankConfig(&m_.comm, m_.world, id, m_.rank, &config), "init");
    } catch (...) {
      release();  // a throwing constructor runs no destructor
      throw;
    }
  }
  // A group made by split(): keeps the parent's device and deadline.
  NcclBackend(const NcclBackend& parent, ncclComm_t group) : Instance(parent.host()) {
    m_.timeout_ms = parent.m_.timeout_ms;
    m_.device = parent.m_.device;
    m_.comm = group;
    try {
      if (ncclCommUserRank(group, &m_.rank) != ncclSuccess ||
          ncclCommCount(group, &m_.world) != ncclSuccess)
        throw Error(DSCORE_UNAVAILABLE,
                    "nccl split: NCCL could not report the new group's rank and size");
      open_stream();
    } catch (...) {
      m_.abort_comm("split failed");
      release();
      throw;
    }
  }
  ~NcclBackend() override { release(); }

  NcclComm& state() { return m_; }
  const NcclComm& state() const { return m_; }

  void abort(const char* reason) {
    const std::string why = reason != nullptr ? reason : "(no reason)";
    host().log(DSCORE_LOG_ERROR, "nccl",
               "rank " + std::to_string(m_.rank) + " aborts its NCCL communicator: " + why);
    m_.abort_comm("aborted: " + why);
  }

  // ncclCommSplit over this communicator (NCCL_SPLIT_NOCOLOR for
  // DSCORE_COMM_SPLIT_NONE), non-blocking like the parent.
  NcclBackend* split(int32_t color, int32_t key) {
    m_.ready("split");
    ncclConfig_t config = non_blocking_config();
    ncclComm_t group = nullptr;
    m_.enqueued(ncclCommSplit(m_.comm, color == DSCORE_COMM_SPLIT_NONE ? NCCL_SPLIT_NOCOLOR : color,
                              key, &group, &config),
                "split");
    m_.counters.operations += 1;
    if (color == DSCORE_COMM_SPLIT_NONE) return nullptr;
    // NCCL writes the new handle when the split's job ends: wait for it.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(m_.timeout_ms);
    while (__atomic_load_n(&group, __ATOMIC_ACQUIRE) == nullptr) {
      ncclResult_t state = ncclInProgress;
      m_.enqueued(state, "split");  // throws (and aborts) on an error or at the deadline
      if (std::chrono::steady_clock::now() > deadline) {
        // Aborting ends the split's job, which would write `group` later.
        const std::string why = "nccl split on rank " + std::to_string(m_.rank) +
                                ": NCCL reported the split done but gave no new communicator "
                                "within comm.timeout_ms; the communicator was aborted";
        m_.abort_comm(why);
        throw Error(DSCORE_DEADLINE_EXCEEDED, why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // The new communicator connects in the background: wait for it too.
    NcclComm probe;
    probe.comm = group;
    probe.rank = m_.rank;
    probe.world = m_.world;
    probe.device = m_.device;
    probe.timeout_ms = m_.timeout_ms;
    ncclResult_t state = ncclInProgress;
    probe.enqueued(state, "split");  // throws (and aborts the group) on failure
    return new NcclBackend(*this, group);
  }

 private:
  // Rank 0's unique id, through the job's key-value store.
  ncclUniqueId exchange_id() {
    const dscore_host_api* api = sdk::host();
    if (api == nullptr || api->kv_get == nullptr || api->kv_set == nullptr)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "nccl: the host has no key-value store to pass the NCCL unique id between ranks");
    dscore_host_context* ctx = host().context();
    const std::string count_key = "dscore.nccl.count." + std::to_string(m_.rank);
    uint64_t n = 0;
    size_t size = 0;
    if (api->kv_get(ctx, count_key.c_str(), &n, sizeof n, &size, 0) != DSCORE_OK) n = 0;
    sdk::check(api->kv_set(ctx, count_key.c_str(), &(++n), sizeof n));
    const std::string key = "dscore.nccl.unique_id." + std::to_string(n);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (m_.rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess)
        throw Error(DSCORE_UNAVAILABLE, std::string("nccl: ncclGetUniqueId failed on rank 0: ") +
                                            ncclGetErrorString(r) + " (" +
                                            ncclGetLastError(nullptr) +
                                            "); check the network interfaces (NCCL_SOCKET_IFNAME)");
      sdk::check(api->kv_set(ctx, key.c_str(), &id, sizeof id));
    } else {
      // The store's own message (the key, the store's address, the ranks
      // that never connected) reaches the user unchanged.
      sdk::check(api->kv_get(ctx, key.c_str(), &id, sizeof id, &size, m_.timeout_ms));
      if (size != sizeof id)
        throw Error(DSCORE_DATA_LOSS, "nccl: rank " + std::to_string(m_.rank) + " received " +
                                          std::to_string(size) + " bytes under '" + key +
                                          "' where rank 0's NCCL unique id (" +
                                          std::to_string(sizeof id) +
                                          " bytes) belongs: the ranks do not all run this plugin");
    }
    return id;
  }

  void open_stream() {
    DSCORE_CUDA_CHECK(cudaStreamCreateWithFlags(&m_.stream, cudaStreamNonBlocking));
    DSCORE_CUDA_CHECK(cudaMalloc(&m_.barrier_scalar, sizeof(float)));
    DSCORE_CUDA_CHECK(cudaMemsetAsync(m_.barrier_scalar, 0, sizeof(float), m_.stream));
  }

  void release() {
    cudaSetDevice(m_.device);
    if (m_.comm != nullptr) finalize();
    if (m_.barrier_scalar != nullptr) cudaFree(m_.barrier_scalar);
    if (m_.stream != nullptr) cudaStreamDestroy(m_.stream);
    m_.barrier_scalar = nullptr;
    m_.stream = nullptr;
  }

  // Flush and free the communicator within the deadline; abort otherwise.
  void finalize() {
    try {
      m_.enqueued(ncclCommFinalize(m_.comm), "destroy");
      ncclCommDestroy(m_.comm);
      m_.comm = nullptr;
    } catch (const Error& e) {
      host().log(DSCORE_LOG_WARNING, "nccl", e.what());  // enqueued() aborted it
    }
  }

  NcclComm m_;
};

// The vtable, written out rather than taken from sdk/include/dscore/cpp/comm_plugin.hpp:
// that adapter is for CPU backends and drops the `stream` arguments.
using S = sdk::Shim<dscore_comm, NcclBackend>;
using Tensor = const dscore_tensor*;
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

dscore_status create(const dscore_create_args* args, dscore_comm** out) {
  return S::create(args, out);
}
// Inside a group: records a groupable op, refuses the others.
void note(NcclComm* m, const char* op, bool groupable) {
  if (!m->grouping) return;
  if (!groupable)
    throw Error(DSCORE_FAILED_PRECONDITION,
                std::string("nccl ") + op +
                    " cannot be grouped: issue it before group_start or after group_end");
  m->group_ops.push_back(op);
}
dscore_status allreduce(dscore_comm* c, Tensor s, dscore_tensor* r, dscore_reduce_op op, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "allreduce", true);
    nccl_comm::allreduce(&b.state(), s, r, op, as_stream(st));
  });
}
dscore_status reduce_scatter(dscore_comm* c, Tensor s, dscore_tensor* r, dscore_reduce_op op,
                             void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "reduce_scatter", true);
    nccl_comm::reduce_scatter(&b.state(), s, r, op, as_stream(st));
  });
}
dscore_status reduce(dscore_comm* c, Tensor s, dscore_tensor* r, dscore_reduce_op op, int32_t root,
                     void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "reduce", true);
    nccl_comm::reduce(&b.state(), s, r, op, root, as_stream(st));
  });
}
dscore_status allgather(dscore_comm* c, Tensor s, dscore_tensor* r, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "allgather", true);
    nccl_comm::allgather(&b.state(), s, r, as_stream(st));
  });
}
dscore_status all_to_all(dscore_comm* c, Tensor s, dscore_tensor* r, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "all_to_all", true);
    nccl_comm::all_to_all(&b.state(), s, r, as_stream(st));
  });
}
dscore_status all_to_all_v(dscore_comm* c, Tensor s, dscore_tensor* r,
                           const dscore_all_to_all_layout* layout, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    if (layout == nullptr || layout->send_counts == nullptr || layout->send_offsets == nullptr ||
        layout->recv_counts == nullptr || layout->recv_offsets == nullptr)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       "all_to_all_v: the layout or one of its arrays is NULL");
    note(&b.state(), "all_to_all_v", false);
    nccl_comm::all_to_all_v(&b.state(), s, r, *layout, as_stream(st));
  });
}
dscore_status broadcast(dscore_comm* c, dscore_tensor* t, int32_t root, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "broadcast", true);
    nccl_comm::broadcast(&b.state(), t, root, as_stream(st));
  });
}
dscore_status send(dscore_comm* c, Tensor t, int32_t peer, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "send", false);
    point_to_point(&b.state(), t, peer, true, as_stream(st));
  });
}
dscore_status recv(dscore_comm* c, dscore_tensor* t, int32_t peer, void* st) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "recv", false);
    point_to_point(&b.state(), t, peer, false, as_stream(st));
  });
}
dscore_status barrier(dscore_comm* c) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "barrier", false);
    nccl_comm::barrier(&b.state());
  });
}
void abort(dscore_comm* c, const char* reason) { S::self(c).abort(reason); }
dscore_status counters(const dscore_comm* c, dscore_comm_counters* out) {
  return S::call(c, [&](const NcclBackend& b) {
    out->operations = b.state().counters.operations;
    out->bytes_sent = b.state().counters.bytes_sent;
    out->bytes_received = b.state().counters.bytes_received;
  });
}
dscore_status split(dscore_comm* c, int32_t color, int32_t key, dscore_comm** out) {
  return S::call(c, [&](NcclBackend& b) {
    note(&b.state(), "split", false);
    *out = reinterpret_cast<dscore_comm*>(b.split(color, key));
  });
}
dscore_status group_start(dscore_comm* c) {
  return S::call(c, [&](NcclBackend& b) {
    NcclComm* m = &b.state();
    m->ready("group_start");
    if (m->grouping)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "nccl group_start: a group is already open on this communicator; groups do not "
                  "nest");
    const ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
      throw Error(DSCORE_INTERNAL,
                  std::string("nccl ncclGroupStart failed: ") + ncclGetErrorString(r));
    m->grouping = true;
    m->group_ops.clear();
  });
}
dscore_status group_end(dscore_comm* c, void*) {
  return S::call(c, [&](NcclBackend& b) {
    NcclComm* m = &b.state();
    if (!m->grouping) throw Error(DSCORE_FAILED_PRECONDITION, "nccl group_end without group_start");
    m->grouping = false;
    std::string what = "the group of " + std::to_string(m->group_ops.size()) + " collectives (";
    for (size_t i = 0; i < m->group_ops.size(); ++i)
      what += (i == 0 ? "" : ", ") + std::string(m->group_ops[i]);
    what += ")";
    m->group_ops.clear();
    m->ready("group_end");
    // enqueued() keeps `op` only for the message; `what` outlives the call.
    m->enqueued(ncclGroupEnd(), what.c_str());
  });
}

dscore_comm_vtable make_vtable() {
  dscore_comm_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = &create;
  vt.destroy = &S::destroy;
  vt.allreduce = &allreduce;
  vt.reduce_scatter = &reduce_scatter;
  vt.allgather = &allgather;
  vt.broadcast = &broadcast;
  vt.send = &send;
  vt.recv = &recv;
  vt.barrier = &barrier;
  vt.all_to_all = &all_to_all;
  vt.all_to_all_v = &all_to_all_v;
  vt.abort = &abort;
  vt.reduce = &reduce;
  vt.counters = &counters;
  vt.split = &split;
  vt.group_start = &group_start;
  vt.group_end = &group_end;
  return vt;
}
const dscore_comm_vtable kVtable = make_vtable();

constexpr const char kParamsSchema[] = R"json({
  "timeout_ms": {"type": "int", "default": 300000, "min": 1,
                 "doc": "deadline of communicator creation and of every wait (barrier); past it the NCCL communicator is aborted and the job ends with a message naming the collective and the rank"}
})json";

const dscore_plugin_descriptor kNccl = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_COMM,
    "nccl",
    "0.1.0",
    "NCCL backend for CUDA tensors: one GPU per rank, collectives on the caller's stream, "
    "non-blocking communicators aborted past the deadline",
    DSCORE_CAP_CUDA | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16 | DSCORE_CAP_MULTI_RANK,
    kParamsSchema,
    &kVtable};

}  // namespace
}  // namespace dscore::nccl_comm

DSCORE_PLUGIN_LIBRARY("dscore-comm-nccl", "0.1.0", "dscore", &dscore::nccl_comm::kNccl)
