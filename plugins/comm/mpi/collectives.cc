// The collectives of the MPI backend. Data moves with MPI's nonblocking
// primitives (all-to-all, gather, allgather, broadcast); every reduction is
// then computed locally in rank order (dscore/cpp/ordered_reduce.hpp, on the CPU's widest
// vector ISA: ordered_reduce_isa.h), so results are
// deterministic, and bandwidth matches the ring algorithms: a reduce-scatter
// is one all-to-all, an allreduce a reduce-scatter plus an allgather.
// Counters record the logical payload that left and reached this rank.
#include <dscore/cpp/dtype.hpp>

#include <cstring>
#include <functional>
#include <vector>

#include "collectives.h"
#include "ordered_reduce_isa.h"

namespace dscore::mpi_comm {
namespace {

using sdk::Error;

size_t element_size(const dscore_tensor* t) {
  size_t size = sdk::dtype_size(t->dtype);
  if (size == 0) throw Error(DSCORE_INVALID_ARGUMENT, "tensor has an invalid dtype");
  return size;
}

void check_cpu(const dscore_tensor* t, const char* op) {
  if (t == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, std::string(op) + ": NULL tensor");
  if (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST)
    throw Error(DSCORE_INVALID_ARGUMENT,
                std::string(op) +
                    ": the mpi backend moves CPU tensors only (use \"nccl\" for GPU tensors)");
}

// An MPI datatype of one element, so counts stay element counts.
class ElementType {
 public:
  explicit ElementType(size_t bytes) {
    DSCORE_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_));
    DSCORE_MPI_CHECK(MPI_Type_commit(&type_));
  }
  ~ElementType() { MPI_Type_free(&type_); }
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_;
};

int count_of(int64_t n, const char* op) {
  if (n > INT32_MAX)
    throw Error(DSCORE_INVALID_ARGUMENT,
                std::string(op) + ": " + std::to_string(n) +
                    " elements per chunk exceed MPI's int counts; use smaller buckets");
  return static_cast<int>(n);
}

// Reduce-scatter of `chunks` (world x c elements) into `out` (c elements):
// one all-to-all, then the ordered local reduction; `then` after that.
void reduce_scatter_impl(MpiComm* m, const void* chunks, int64_t c, dscore_dtype dtype,
                         dscore_reduce_op op, void* out, const char* name,
                         std::function<void()> then) {
  const size_t es = sdk::dtype_size(dtype);
  const size_t bytes = static_cast<size_t>(c) * static_cast<size_t>(m->world) * es;
  unsigned char* gathered = m->scratch(&m->scratch_b, bytes);
  ElementType type(es);
  const uint64_t seq = m->begin(name);
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Ialltoall(chunks, count_of(c, name), type.get(), gathered, count_of(c, name),
                                 type.get(), m->comm, &request));
  m->complete(request, name, seq, bytes, [m, gathered, c, dtype, op, out, es, then] {
    reduce_chunks_widest(gathered, m->world, c, dtype, op, out, &m->reduce_scratch);
    const uint64_t moved = static_cast<uint64_t>(c) * (m->world - 1) * es;
    m->counters.bytes_sent += moved;
    m->counters.bytes_received += moved;
    if (then) then();
  });
}

void allgather_impl(MpiComm* m, const void* send, int64_t n, size_t es, void* recv,
                    const char* name, std::function<void()> then) {
  ElementType type(es);
  const uint64_t seq = m->begin(name);
  const bool in_place =
      send == static_cast<unsigned char*>(recv) + static_cast<size_t>(m->rank) * n * es;
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, count_of(n, name), type.get(),
                                  recv, count_of(n, name), type.get(), m->comm, &request));
  m->complete(request, name, seq, static_cast<size_t>(n) * m->world * es, [m, n, es, then] {
    const uint64_t moved = static_cast<uint64_t>(n) * (m->world - 1) * es;
    m->counters.bytes_sent += moved;
    m->counters.bytes_received += moved;
    if (then) then();
  });
}

}  // namespace

void allreduce(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op) {
  m->enter("allreduce", true);
  check_cpu(send, "allreduce");
  check_cpu(recv, "allreduce");
  if (send->numel != recv->numel || send->dtype != recv->dtype)
    throw Error(DSCORE_INVALID_ARGUMENT, "allreduce: send and recv differ in numel or dtype");
  const size_t es = element_size(send);
  const int64_t n = send->numel, w = m->world;
  const int64_t c = (n + w - 1) / w;  // chunk per rank, the last padded with zeros
  if (c * w == n) {
    // Whole chunks: this rank's reduced chunk goes straight to its place in
    // recv, then the allgather fills the rest of recv in place. (send may be
    // recv: the all-to-all has read it before the reduction writes.)
    auto* out = static_cast<unsigned char*>(recv->data);
    unsigned char* own = out + static_cast<size_t>(m->rank * c) * es;
    reduce_scatter_impl(m, send->data, c, send->dtype, op, own, "allreduce", [m, own, c, es, out] {
      allgather_impl(m, own, c, es, out, "allreduce", [m] { m->counters.operations += 1; });
    });
    return;
  }
  // Padded copy of the input, so every rank's chunk has c elements.
  unsigned char* padded = m->scratch(&m->scratch_a, static_cast<size_t>(c * w) * es * 2);
  std::memcpy(padded, send->data, static_cast<size_t>(n) * es);
  std::memset(padded + n * es, 0, static_cast<size_t>(c * w - n) * es);
  unsigned char* mine = padded + static_cast<size_t>(c * w) * es;  // c elements
  void* out = recv->data;
  reduce_scatter_impl(m, padded, c, send->dtype, op, mine, "allreduce",
                      [m, padded, mine, c, n, es, out] {
                        // Gather every rank's reduced chunk back into `padded`, then trim.
                        unsigned char* own = padded + static_cast<size_t>(m->rank * c) * es;
                        std::memcpy(own, mine, static_cast<size_t>(c) * es);
                        allgather_impl(m, own, c, es, padded, "allreduce", [m, padded, n, es, out] {
                          std::memcpy(out, padded, static_cast<size_t>(n) * es);
                          m->counters.operations += 1;
                        });
                      });
}

void reduce_scatter(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv,
                    dscore_reduce_op op) {
  m->enter("reduce_scatter", true);
  check_cpu(send, "reduce_scatter");
  check_cpu(recv, "reduce_scatter");
  if (send->dtype != recv->dtype || send->numel != recv->numel * m->world)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "reduce_scatter: send must hold world_size x recv elements of the same dtype (" +
                    std::to_string(send->numel) + " vs " + std::to_string(m->world) + " x " +
                    std::to_string(recv->numel) + ")");
  reduce_scatter_impl(m, send->data, recv->numel, send->dtype, op, recv->data, "reduce_scatter",
                      [m] { m->counters.operations += 1; });
}

void reduce(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
            int root) {
  m->enter("reduce", true);
  check_cpu(send, "reduce");
  if (root < 0 || root >= m->world)
    throw Error(DSCORE_OUT_OF_RANGE, "reduce: root " + std::to_string(root) + " is not a rank");
  if (m->rank == root) {
    check_cpu(recv, "reduce");
    if (recv->numel != send->numel || recv->dtype != send->dtype)
      throw Error(DSCORE_INVALID_ARGUMENT, "reduce: send and recv differ in numel or dtype");
  }
  const size_t es = element_size(send);
  const int64_t n = send->numel;
  const size_t total = static_cast<size_t>(n) * m->world * es;
  unsigned char* gathered = m->rank == root ? m->scratch(&m->scratch_b, total) : nullptr;
  ElementType type(es);
  const uint64_t seq = m->begin("reduce");
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Igather(send->data, count_of(n, "reduce"), type.get(), gathered,
                               count_of(n, "reduce"), type.get(), root, m->comm, &request));
  const dscore_dtype dtype = send->dtype;
  void* out = m->rank == root ? recv->data : nullptr;
  m->complete(request, "reduce", seq, static_cast<size_t>(n) * es,
              [m, root, gathered, n, dtype, op, out, es] {
                if (m->rank == root) {
                  reduce_chunks_widest(gathered, m->world, n, dtype, op, out, &m->reduce_scratch);
                  m->counters.bytes_received += static_cast<uint64_t>(n) * (m->world - 1) * es;
                } else {
                  m->counters.bytes_sent += static_cast<uint64_t>(n) * es;
                }
                m->counters.operations += 1;
              });
}

void allgather(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv) {
  m->enter("allgather", true);
  check_cpu(send, "allgather");
  check_cpu(recv, "allgather");
  if (send->dtype != recv->dtype || recv->numel != send->numel * m->world)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "allgather: recv must hold world_size x send elements of the same dtype");
  allgather_impl(m, send->data, send->numel, element_size(send), recv->data, "allgather",
                 [m] { m->counters.operations += 1; });
}

void all_to_all(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv) {
  m->enter("all_to_all", true);
  check_cpu(send, "all_to_all");
  check_cpu(recv, "all_to_all");
  if (send->dtype != recv->dtype || send->numel != recv->numel || send->numel % m->world != 0)
    throw Error(
        DSCORE_INVALID_ARGUMENT,
        "all_to_all: send and recv need the same dtype and numel, a multiple of world_size");
  const size_t es = element_size(send);
  const int64_t c = send->numel / m->world;
  ElementType type(es);
  const uint64_t seq = m->begin("all_to_all");
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Ialltoall(send->data, count_of(c, "all_to_all"), type.get(), recv->data,
                                 count_of(c, "all_to_all"), type.get(), m->comm, &request));
  m->complete(request, "all_to_all", seq, static_cast<size_t>(send->numel) * es, [m, c, es] {
    const uint64_t moved = static_cast<uint64_t>(c) * (m->world - 1) * es;
    m->counters.bytes_sent += moved;
    m->counters.bytes_received += moved;
    m->counters.operations += 1;
  });
}

void all_to_all_v(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv,
                  const dscore_all_to_all_layout& layout) {
  m->enter("all_to_all_v", false);
  check_cpu(send, "all_to_all_v");
  check_cpu(recv, "all_to_all_v");
  if (send->dtype != recv->dtype || send->data == recv->data)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "all_to_all_v: send and recv need the same dtype and different buffers");
  const size_t es = element_size(send);
  std::vector<int> send_counts, send_offsets, recv_counts, recv_offsets;
  uint64_t sent = 0, received = 0;
  for (int j = 0; j < m->world; ++j) {
    send_counts.push_back(count_of(layout.send_counts[j], "all_to_all_v"));
    send_offsets.push_back(count_of(layout.send_offsets[j], "all_to_all_v"));
    recv_counts.push_back(count_of(layout.recv_counts[j], "all_to_all_v"));
    recv_offsets.push_back(count_of(layout.recv_offsets[j], "all_to_all_v"));
    if (j != m->rank) {
      sent += static_cast<uint64_t>(layout.send_counts[j]) * es;
      received += static_cast<uint64_t>(layout.recv_counts[j]) * es;
    }
  }
  ElementType type(es);
  const uint64_t seq = m->begin("all_to_all_v");
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Ialltoallv(send->data, send_counts.data(), send_offsets.data(), type.get(),
                                  recv->data, recv_counts.data(), recv_offsets.data(), type.get(),
                                  m->comm, &request));
  // Not grouped (enter refused it), so this completes before the vectors go.
  m->complete(request, "all_to_all_v", seq, static_cast<size_t>(sent + received),
              [m, sent, received] {
                m->counters.bytes_sent += sent;
                m->counters.bytes_received += received;
                m->counters.operations += 1;
              });
}

void broadcast(MpiComm* m, dscore_tensor* tensor, int root) {
  m->enter("broadcast", true);
  check_cpu(tensor, "broadcast");
  if (root < 0 || root >= m->world)
    throw Error(DSCORE_OUT_OF_RANGE, "broadcast: root " + std::to_string(root) + " is not a rank");
  const size_t es = element_size(tensor);
  ElementType type(es);
  const uint64_t seq = m->begin("broadcast");
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Ibcast(tensor->data, count_of(tensor->numel, "broadcast"), type.get(), root,
                              m->comm, &request));
  const uint64_t bytes = static_cast<uint64_t>(tensor->numel) * es;
  m->complete(request, "broadcast", seq, bytes, [m, root, bytes] {
    if (m->rank == root)
      m->counters.bytes_sent += bytes * (m->world - 1);
    else
      m->counters.bytes_received += bytes;
    m->counters.operations += 1;
  });
}

void point_to_point(MpiComm* m, const dscore_tensor* tensor, int peer, bool sending) {
  const char* name = sending ? "send" : "recv";
  m->enter(name, false);
  check_cpu(tensor, name);
  if (peer < 0 || peer >= m->world || peer == m->rank)
    throw Error(DSCORE_OUT_OF_RANGE, std::string(name) + ": peer " + std::to_string(peer) +
                                         " is not another rank of this job");
  const size_t es = element_size(tensor);
  ElementType type(es);
  // Point-to-point calls are not collectives: they do not advance the
  // sequence shared by all ranks, so they use their own op label.
  MPI_Request request;
  const int count = count_of(tensor->numel, name);
  if (sending) {
    DSCORE_MPI_CHECK(MPI_Isend(tensor->data, count, type.get(), peer, 0, m->comm, &request));
  } else {
    DSCORE_MPI_CHECK(MPI_Irecv(tensor->data, count, type.get(), peer, 0, m->comm, &request));
  }
  m->wait(&request, 1, name, m->sequence, static_cast<size_t>(tensor->numel) * es);
  const uint64_t bytes = static_cast<uint64_t>(tensor->numel) * es;
  (sending ? m->counters.bytes_sent : m->counters.bytes_received) += bytes;
  m->counters.operations += 1;
}

void barrier(MpiComm* m) {
  m->enter("barrier", false);
  const uint64_t seq = m->begin("barrier");
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Ibarrier(m->comm, &request));
  m->wait(&request, 1, "barrier", seq, 0);
  m->counters.operations += 1;
}

}  // namespace dscore::mpi_comm
