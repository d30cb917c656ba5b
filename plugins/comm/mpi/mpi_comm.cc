// The "mpi" comm backend (OpenMPI or any MPI-3 library): CPU tensors,
// deterministic reductions, a deadline on every collective, and MPI_Abort
// to end every rank when one of them fails. Rank and world come from the
// launcher (mpirun, srun); the host's rank/world must agree with MPI's.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <dscore/cpp/instance.hpp>

#include "collectives.h"
#include "mpi_comm.h"

namespace dscore::mpi_comm {
namespace {

using sdk::Error;

MpiComm* self_of(dscore_comm* c) { return reinterpret_cast<MpiComm*>(c); }

// MPI can be initialised once per process and never again after
// MPI_Finalize, while a process may create several communicators (one per
// engine). So MPI is finalised at exit; this library stays mapped once used
// (the host pins it), so the handler stays valid.
void finalize_at_exit() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

dscore_status create(const dscore_create_args* args, dscore_comm** out) {
  sdk::HostRef host(args);
  return sdk::guard(host, [&] {
    sdk::Params params(args);
    auto m = std::make_unique<MpiComm>();
    m->host = host;
    m->timeout_ms = params.integer("timeout_ms");
    int initialized = 0;
    DSCORE_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;
      // SERIALIZED: the host calls from its comm thread and, at start and
      // end, from the main thread, never two at once.
      DSCORE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      std::atexit(&finalize_at_exit);
      if (provided < MPI_THREAD_SERIALIZED)
        throw Error(DSCORE_FAILED_PRECONDITION,
                    "this MPI library does not support MPI_THREAD_SERIALIZED; dscore's comm "
                    "thread needs it");
    }
    DSCORE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
    DSCORE_MPI_CHECK(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
    DSCORE_MPI_CHECK(MPI_Comm_rank(m->comm, &m->rank));
    DSCORE_MPI_CHECK(MPI_Comm_size(m->comm, &m->world));
    if (m->rank != args->rank || m->world != args->world_size)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "MPI says rank " + std::to_string(m->rank) + " of " + std::to_string(m->world) +
                      " but the launcher environment says rank " + std::to_string(args->rank) +
                      " of " + std::to_string(args->world_size) +
                      ": start the job with mpirun or srun (or `dscore run -n N`)");
    m->board = new HeartbeatBoard(m->comm, m->rank, m->world, m->timeout_ms);
    *out = reinterpret_cast<dscore_comm*>(m.release());
  });
}

void destroy(dscore_comm* c) {
  MpiComm* m = self_of(c);
  delete m->board;
  if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
  delete m;
}

template <typename Body>
dscore_status run(dscore_comm* c, Body&& body) {
  return sdk::guard(self_of(c)->host, [&] { body(); });
}

dscore_status v_allreduce(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r,
                          dscore_reduce_op op, void*) {
  return run(c, [&] { allreduce(self_of(c), s, r, op); });
}
dscore_status v_reduce_scatter(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r,
                               dscore_reduce_op op, void*) {
  return run(c, [&] { reduce_scatter(self_of(c), s, r, op); });
}
dscore_status v_reduce(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op op,
                       int32_t root, void*) {
  return run(c, [&] { reduce(self_of(c), s, r, op, root); });
}
dscore_status v_allgather(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r, void*) {
  return run(c, [&] { allgather(self_of(c), s, r); });
}
dscore_status v_all_to_all(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r, void*) {
  return run(c, [&] { all_to_all(self_of(c), s, r); });
}
dscore_status v_broadcast(dscore_comm* c, dscore_tensor* t, int32_t root, void*) {
  return run(c, [&] { broadcast(self_of(c), t, root); });
}
dscore_status v_send(dscore_comm* c, const dscore_tensor* t, int32_t peer, void*) {
  return run(c, [&] { point_to_point(self_of(c), t, peer, true); });
}
dscore_status v_recv(dscore_comm* c, dscore_tensor* t, int32_t peer, void*) {
  return run(c, [&] { point_to_point(self_of(c), t, peer, false); });
}
dscore_status v_barrier(dscore_comm* c) {
  return run(c, [&] { barrier(self_of(c)); });
}
void v_abort(dscore_comm* c, const char* reason) {
  MpiComm* m = self_of(c);
  m->host.log(DSCORE_LOG_ERROR, "mpi", "rank " + std::to_string(m->rank) + " aborts the job: " +
                                           std::string(reason != nullptr ? reason : "(no reason)"));
  MPI_Abort(m->comm != MPI_COMM_NULL ? m->comm : MPI_COMM_WORLD, 1);
}
// MPI_Comm_split over this communicator; the new one gets its own
// heartbeat board and keeps this one's deadline.
dscore_status v_split(dscore_comm* c, int32_t color, int32_t key, dscore_comm** out) {
  return run(c, [&] {
    MpiComm* parent = self_of(c);
    MPI_Comm split = MPI_COMM_NULL;
    const int mpi_color = color == DSCORE_COMM_SPLIT_NONE ? MPI_UNDEFINED : color;
    DSCORE_MPI_CHECK(MPI_Comm_split(parent->comm, mpi_color, key, &split));
    *out = nullptr;
    if (split == MPI_COMM_NULL) return;
    auto m = std::make_unique<MpiComm>();
    m->host = parent->host;
    m->comm = split;
    m->timeout_ms = parent->timeout_ms;
    DSCORE_MPI_CHECK(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
    DSCORE_MPI_CHECK(MPI_Comm_rank(m->comm, &m->rank));
    DSCORE_MPI_CHECK(MPI_Comm_size(m->comm, &m->world));
    m->board = new HeartbeatBoard(m->comm, m->rank, m->world, m->timeout_ms);
    *out = reinterpret_cast<dscore_comm*>(m.release());
  });
}
dscore_status v_counters(const dscore_comm* c, dscore_comm_counters* out) {
  const MpiComm* m = reinterpret_cast<const MpiComm*>(c);
  out->operations = m->counters.operations;
  out->bytes_sent = m->counters.bytes_sent;
  out->bytes_received = m->counters.bytes_received;
  return DSCORE_OK;
}

dscore_comm_vtable make_vtable() {
  dscore_comm_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = &create;
  vt.destroy = &destroy;
  vt.allreduce = &v_allreduce;
  vt.reduce_scatter = &v_reduce_scatter;
  vt.allgather = &v_allgather;
  vt.broadcast = &v_broadcast;
  vt.send = &v_send;
  vt.recv = &v_recv;
  vt.barrier = &v_barrier;
  vt.all_to_all = &v_all_to_all;
  vt.abort = &v_abort;
  vt.reduce = &v_reduce;
  vt.counters = &v_counters;
  vt.split = &v_split;
  return vt;
}
const dscore_comm_vtable kVtable = make_vtable();

constexpr const char kParamsSchema[] = R"json({
  "timeout_ms": {"type": "int", "default": 300000, "min": 1,
                 "doc": "deadline of every collective; a rank that does not arrive in time ends the job with a message naming it"}
})json";

const dscore_plugin_descriptor kMpi = {
    sizeof(dscore_plugin_descriptor), DSCORE_KIND_COMM, "mpi", "0.1.0",
    "MPI backend for CPU tensors: deterministic reductions, per-collective deadlines",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16 | DSCORE_CAP_MULTI_RANK,
    kParamsSchema, &kVtable};
const dscore_plugin_descriptor* const kPlugins[] = {&kMpi};
const dscore_plugin_library kLibrary = sdk::plugin_library("dscore-comm-mpi", "0.1.0", "dscore", kPlugins);

}  // namespace
}  // namespace dscore::mpi_comm

DSCORE_PLUGIN_ENTRY(dscore::mpi_comm::kLibrary)
