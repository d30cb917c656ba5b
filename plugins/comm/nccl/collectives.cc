// The collectives of the NCCL backend: one NCCL call each (all_to_all is
// a group of sends and receives), enqueued on the caller's stream. Data
// that only moves (gathers, broadcasts, point-to-point) goes as bytes, so
// every dtype of the ABI moves; reductions use NCCL's element types. AVG is
// ncclAvg, which for floating types scales each input by 1/world before
// summing (results can differ from sum/world in the last bit at world sizes
// that are not powers of two). Counters record the logical payload that
// leaves and reaches this rank, with the mpi backend's formulas, counted
// when the collective is enqueued.
#include "collectives.h"

#include <dscore/cpp/dtype.hpp>

namespace dscore::nccl_comm {
namespace {

using sdk::Error;

cudaStream_t pick(const NcclComm* m, cudaStream_t stream) {
  return stream != nullptr ? stream : m->stream;
}

size_t bytes_of(const dscore_tensor* t) {
  return static_cast<size_t>(t->numel) * sdk::dtype_size(t->dtype);
}

void check_root(const NcclComm* m, int root, const char* op) {
  if (root < 0 || root >= m->world)
    throw Error(DSCORE_OUT_OF_RANGE, "nccl " + std::string(op) + ": root " + std::to_string(root) +
                                         " is not a rank of this communicator (world size " +
                                         std::to_string(m->world) + ")");
}

void count(NcclComm* m, uint64_t sent, uint64_t received) {
  m->counters.bytes_sent += sent;
  m->counters.bytes_received += received;
  m->counters.operations += 1;
}

}  // namespace

void allreduce(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
               cudaStream_t stream) {
  m->ready("allreduce");
  check_cuda_tensor(*m, send, "allreduce");
  check_cuda_tensor(*m, recv, "allreduce");
  if (send->numel != recv->numel || send->dtype != recv->dtype)
    throw Error(DSCORE_INVALID_ARGUMENT, "nccl allreduce: send and recv differ in numel or dtype");
  m->enqueued(ncclAllReduce(send->data, recv->data, static_cast<size_t>(send->numel),
                            reduction_type(send->dtype, "allreduce"), nccl_op(op, "allreduce"),
                            m->comm, pick(m, stream)),
              "allreduce");
  // Ring volume: a reduce-scatter and an allgather of ceil(n / world) chunks.
  const uint64_t c = (static_cast<uint64_t>(send->numel) + m->world - 1) / m->world;
  const uint64_t moved = 2 * c * (m->world - 1) * sdk::dtype_size(send->dtype);
  count(m, moved, moved);
}

void reduce_scatter(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv,
                    dscore_reduce_op op, cudaStream_t stream) {
  m->ready("reduce_scatter");
  check_cuda_tensor(*m, send, "reduce_scatter");
  check_cuda_tensor(*m, recv, "reduce_scatter");
  if (send->dtype != recv->dtype || send->numel != recv->numel * m->world)
    throw Error(
        DSCORE_INVALID_ARGUMENT,
        "nccl reduce_scatter: send must hold world_size x recv elements of the same dtype (" +
            std::to_string(send->numel) + " vs " + std::to_string(m->world) + " x " +
            std::to_string(recv->numel) + ")");
  m->enqueued(ncclReduceScatter(send->data, recv->data, static_cast<size_t>(recv->numel),
                                reduction_type(send->dtype, "reduce_scatter"),
                                nccl_op(op, "reduce_scatter"), m->comm, pick(m, stream)),
              "reduce_scatter");
  const uint64_t moved = bytes_of(recv) * (m->world - 1);
  count(m, moved, moved);
}

void reduce(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
            int root, cudaStream_t stream) {
  m->ready("reduce");
  check_cuda_tensor(*m, send, "reduce");
  check_root(m, root, "reduce");
  if (m->rank == root) {
    check_cuda_tensor(*m, recv, "reduce");
    if (recv->numel != send->numel || recv->dtype != send->dtype)
      throw Error(DSCORE_INVALID_ARGUMENT, "nccl reduce: send and recv differ in numel or dtype");
  }
  void* out = m->rank == root ? recv->data : nullptr;
  m->enqueued(ncclReduce(send->data, out, static_cast<size_t>(send->numel),
                         reduction_type(send->dtype, "reduce"), nccl_op(op, "reduce"), root,
                         m->comm, pick(m, stream)),
              "reduce");
  const uint64_t bytes = bytes_of(send);
  if (m->rank == root)
    count(m, 0, bytes * (m->world - 1));
  else
    count(m, bytes, 0);
}

void allgather(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, cudaStream_t stream) {
  m->ready("allgather");
  check_cuda_tensor(*m, send, "allgather");
  check_cuda_tensor(*m, recv, "allgather");
  if (send->dtype != recv->dtype || recv->numel != send->numel * m->world)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "nccl allgather: recv must hold world_size x send elements of the same dtype");
  // In place when send is recv's chunk `rank`: NCCL accepts exactly that.
  m->enqueued(
      ncclAllGather(send->data, recv->data, bytes_of(send), ncclInt8, m->comm, pick(m, stream)),
      "allgather");
  const uint64_t moved = bytes_of(send) * (m->world - 1);
  count(m, moved, moved);
}

void all_to_all(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, cudaStream_t stream) {
  m->ready("all_to_all");
  check_cuda_tensor(*m, send, "all_to_all");
  check_cuda_tensor(*m, recv, "all_to_all");
  if (send->dtype != recv->dtype || send->numel != recv->numel || send->numel % m->world != 0)
    throw Error(
        DSCORE_INVALID_ARGUMENT,
        "nccl all_to_all: send and recv need the same dtype and numel, a multiple of world_size");
  if (send->data == recv->data)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "nccl all_to_all: send and recv must be different buffers (no in-place form)");
  const size_t chunk = bytes_of(send) / static_cast<size_t>(m->world);
  const auto* in = static_cast<const char*>(send->data);
  auto* out = static_cast<char*>(recv->data);
  cudaStream_t s = pick(m, stream);
  // One group: NCCL runs the world's sends and receives together, so no
  // pair waits on another (ncclGroupEnd enqueues them all).
  m->enqueued(ncclGroupStart(), "all_to_all");
  for (int peer = 0; peer < m->world; ++peer) {
    const size_t at = chunk * static_cast<size_t>(peer);
    ncclResult_t r = ncclSend(in + at, chunk, ncclInt8, peer, m->comm, s);
    if (r == ncclSuccess) r = ncclRecv(out + at, chunk, ncclInt8, peer, m->comm, s);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      m->enqueued(r, "all_to_all");
    }
  }
  m->enqueued(ncclGroupEnd(), "all_to_all");
  const uint64_t moved = chunk * (m->world - 1);
  count(m, moved, moved);
}

void all_to_all_v(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv,
                  const dscore_all_to_all_layout& layout, cudaStream_t stream) {
  m->ready("all_to_all_v");
  check_cuda_tensor(*m, send, "all_to_all_v");
  check_cuda_tensor(*m, recv, "all_to_all_v");
  if (send->dtype != recv->dtype || send->data == recv->data)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "nccl all_to_all_v: send and recv need the same dtype and different buffers");
  const size_t es = sdk::dtype_size(send->dtype);
  const auto* in = static_cast<const char*>(send->data);
  auto* out = static_cast<char*>(recv->data);
  cudaStream_t s = pick(m, stream);
  uint64_t sent = 0, received = 0;
  // One group, as all_to_all: every pair's send and receive together.
  m->enqueued(ncclGroupStart(), "all_to_all_v");
  for (int peer = 0; peer < m->world; ++peer) {
    const auto send_bytes = static_cast<size_t>(layout.send_counts[peer]) * es;
    const auto recv_bytes = static_cast<size_t>(layout.recv_counts[peer]) * es;
    ncclResult_t r = ncclSuccess;
    if (send_bytes > 0)
      r = ncclSend(in + static_cast<size_t>(layout.send_offsets[peer]) * es, send_bytes, ncclInt8,
                   peer, m->comm, s);
    if (r == ncclSuccess && recv_bytes > 0)
      r = ncclRecv(out + static_cast<size_t>(layout.recv_offsets[peer]) * es, recv_bytes, ncclInt8,
                   peer, m->comm, s);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      m->enqueued(r, "all_to_all_v");
    }
    if (peer != m->rank) sent += send_bytes, received += recv_bytes;
  }
  m->enqueued(ncclGroupEnd(), "all_to_all_v");
  count(m, sent, received);
}

void broadcast(NcclComm* m, dscore_tensor* tensor, int root, cudaStream_t stream) {
  m->ready("broadcast");
  check_cuda_tensor(*m, tensor, "broadcast");
  check_root(m, root, "broadcast");
  m->enqueued(ncclBroadcast(tensor->data, tensor->data, bytes_of(tensor), ncclInt8, root, m->comm,
                            pick(m, stream)),
              "broadcast");
  const uint64_t bytes = bytes_of(tensor);
  if (m->rank == root)
    count(m, bytes * (m->world - 1), 0);
  else
    count(m, 0, bytes);
}

void point_to_point(NcclComm* m, const dscore_tensor* tensor, int peer, bool sending,
                    cudaStream_t stream) {
  const char* name = sending ? "send" : "recv";
  m->ready(name);
  check_cuda_tensor(*m, tensor, name);
  if (peer < 0 || peer >= m->world || peer == m->rank)
    throw Error(DSCORE_OUT_OF_RANGE, "nccl " + std::string(name) + ": peer " +
                                         std::to_string(peer) +
                                         " is not another rank of this communicator");
  const size_t bytes = bytes_of(tensor);
  m->enqueued(sending ? ncclSend(tensor->data, bytes, ncclInt8, peer, m->comm, pick(m, stream))
                      : ncclRecv(tensor->data, bytes, ncclInt8, peer, m->comm, pick(m, stream)),
              name);
  if (sending)
    count(m, bytes, 0);
  else
    count(m, 0, bytes);
}

void barrier(NcclComm* m) {
  m->ready("barrier");
  m->enqueued(ncclAllReduce(m->barrier_scalar, m->barrier_scalar, 1, ncclFloat32, ncclSum, m->comm,
                            m->stream),
              "barrier");
  m->wait_stream(m->stream, "barrier");
  m->counters.operations += 1;
}

}  // namespace dscore::nccl_comm
