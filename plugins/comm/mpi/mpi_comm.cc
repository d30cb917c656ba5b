// The "mpi" comm backend (OpenMPI or any MPI-3 library): CPU tensors,
// deterministic reductions, a deadline on every collective, and MPI_Abort
// to end every rank when one of them fails. Rank and world come from the
// launcher (mpirun, srun); the host's rank/world must agree with MPI's.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <dscore/cpp/comm_plugin.hpp>

#include "collectives.h"
#include "mpi_comm.h"

namespace dscore::mpi_comm {
namespace {

using sdk::Error;

// MPI can be initialised once per process and never again after
// MPI_Finalize, while a process may create several communicators (one per
// engine). So MPI is finalised at exit; this library stays mapped once used
// (the host pins it), so the handler stays valid.
void finalize_at_exit() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

void init_mpi_once() {
  int initialized = 0;
  DSCORE_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return;
  int provided = 0;
  // SERIALIZED: the host calls from its comm thread and, at start and end,
  // from the main thread, never two at once.
  DSCORE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  std::atexit(&finalize_at_exit);
  if (provided < MPI_THREAD_SERIALIZED)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "this MPI library does not support MPI_THREAD_SERIALIZED; dscore's comm thread "
                "needs it");
}

// One instance: an MPI communicator of its own (a dup of the world, or a
// split of another instance's), its heartbeat board and its deadline.
class MpiBackend : public sdk::Instance {
 public:
  MpiBackend(sdk::HostRef host, const sdk::Params& params) : Instance(host) {
    m_.timeout_ms = params.integer("timeout_ms");
    init_mpi_once();
    int rank = 0, world = 1;
    DSCORE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    DSCORE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    const dscore_create_args* args = params.args();
    if (rank != args->rank || world != args->world_size)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "MPI says rank " + std::to_string(rank) + " of " + std::to_string(world) +
                      " but the launcher environment says rank " + std::to_string(args->rank) +
                      " of " + std::to_string(args->world_size) +
                      ": start the job with mpirun or srun (or `dscore run -n N`)");
    MPI_Comm dup = MPI_COMM_NULL;
    DSCORE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    adopt(dup);
  }
  // A group made by split(): keeps the parent's deadline.
  MpiBackend(const MpiBackend& parent, MPI_Comm group) : Instance(parent.host()) {
    m_.timeout_ms = parent.m_.timeout_ms;
    adopt(group);
  }
  ~MpiBackend() override {
    delete m_.board;
    if (m_.comm != MPI_COMM_NULL) MPI_Comm_free(&m_.comm);
  }

  void allreduce(const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op op) {
    mpi_comm::allreduce(&m_, s, r, op);
  }
  void reduce_scatter(const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op op) {
    mpi_comm::reduce_scatter(&m_, s, r, op);
  }
  void reduce(const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op op, int root) {
    mpi_comm::reduce(&m_, s, r, op, root);
  }
  void allgather(const dscore_tensor* s, dscore_tensor* r) { mpi_comm::allgather(&m_, s, r); }
  void all_to_all(const dscore_tensor* s, dscore_tensor* r) { mpi_comm::all_to_all(&m_, s, r); }
  void all_to_all_v(const dscore_tensor* s, dscore_tensor* r, const dscore_all_to_all_layout& l) {
    mpi_comm::all_to_all_v(&m_, s, r, l);
  }
  void broadcast(dscore_tensor* t, int root) { mpi_comm::broadcast(&m_, t, root); }
  void send(const dscore_tensor* t, int peer) { point_to_point(&m_, t, peer, true); }
  void recv(dscore_tensor* t, int peer) { point_to_point(&m_, t, peer, false); }
  void barrier() { mpi_comm::barrier(&m_); }
  void group_start() { m_.group_start(); }
  void group_end() { m_.group_end(); }
  void abort(const char* reason) {
    host().log(DSCORE_LOG_ERROR, "mpi",
               "rank " + std::to_string(m_.rank) +
                   " aborts the job: " + std::string(reason != nullptr ? reason : "(no reason)"));
    MPI_Abort(m_.comm != MPI_COMM_NULL ? m_.comm : MPI_COMM_WORLD, 1);
  }
  void counters(dscore_comm_counters* out) const {
    out->operations = m_.counters.operations;
    out->bytes_sent = m_.counters.bytes_sent;
    out->bytes_received = m_.counters.bytes_received;
  }
  // MPI_Comm_split over this communicator; the group gets its own heartbeat
  // board.
  MpiBackend* split(int32_t color, int32_t key) {
    m_.enter("split", false);
    MPI_Comm group = MPI_COMM_NULL;
    DSCORE_MPI_CHECK(MPI_Comm_split(
        m_.comm, color == DSCORE_COMM_SPLIT_NONE ? MPI_UNDEFINED : color, key, &group));
    return group == MPI_COMM_NULL ? nullptr : new MpiBackend(*this, group);
  }

 private:
  void adopt(MPI_Comm comm) {
    m_.comm = comm;
    DSCORE_MPI_CHECK(MPI_Comm_set_errhandler(m_.comm, MPI_ERRORS_RETURN));
    DSCORE_MPI_CHECK(MPI_Comm_rank(m_.comm, &m_.rank));
    DSCORE_MPI_CHECK(MPI_Comm_size(m_.comm, &m_.world));
    m_.board = new HeartbeatBoard(m_.comm, m_.rank, m_.world, m_.timeout_ms);
  }
  MpiComm m_;
};

constexpr const char kParamsSchema[] = R"json({
  "timeout_ms": {"type": "int", "default": 300000, "min": 1,
                 "doc": "deadline of every collective; a rank that does not arrive in time ends the job with a message naming it"}
})json";

const dscore_plugin_descriptor kMpi = sdk::comm_descriptor<MpiBackend>(
    "mpi", "0.1.0",
    "MPI backend for CPU tensors: deterministic reductions, per-collective deadlines",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16 | DSCORE_CAP_MULTI_RANK,
    kParamsSchema);

}  // namespace
}  // namespace dscore::mpi_comm

DSCORE_PLUGIN_LIBRARY("dscore-comm-mpi", "0.1.0", "dscore", &dscore::mpi_comm::kMpi)
