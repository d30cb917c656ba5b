#include "core/zero/quantized_reduce.h"

#include <dscore/cpp/dtype.hpp>

#include <vector>

#include "core/tensor/dtype_ops.h"
#include "core/zero/quantization.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {
namespace {

constexpr QuantBits kBits = QuantBits::kInt4;

// One all-to-all over `group` of `per_peer` bytes to each peer.
Status exchange(comm::Communicator& group, std::vector<char>& send, std::vector<char>& recv,
                int64_t per_peer, const device::Device* device) {
  recv.resize(send.size());
  return group.all_to_all(
      device_buffer(device, send.data(), DSCORE_DTYPE_U8, per_peer * group.world_size()),
      device_buffer(device, recv.data(), DSCORE_DTYPE_U8, per_peer * group.world_size()));
}

}  // namespace

Status quantized_reduce_scatter(comm::Communicator& comm, const QuantizedReduceGroups& groups,
                                const void* send, dscore_dtype dtype, int64_t chunk,
                                dscore_reduce_op op, void* out, const device::Device* device) {
  const int world = comm.world_size();
  const int64_t qb = quantized_bytes(chunk, kBits);
  const size_t es = sdk::dtype_size(dtype);
  const auto chunk_of = [&](int r) {
    return static_cast<const char*>(send) +
           static_cast<size_t>(r) * static_cast<size_t>(chunk) * es;
  };
  std::vector<float> sum(static_cast<size_t>(chunk), 0.0f);
  std::vector<char> out_bytes, in_bytes;
  if (groups.node == nullptr || groups.across == nullptr) {
    out_bytes.resize(static_cast<size_t>(qb * world));
    for (int r = 0; r < world; ++r)
      quantize(chunk_of(r), dtype, chunk, kBits, out_bytes.data() + r * qb);
    DSCORE_RETURN_IF_ERROR(exchange(comm, out_bytes, in_bytes, qb, device));
    for (int r = 0; r < world; ++r)
      dequantize_add(in_bytes.data() + r * qb, chunk, kBits, sum.data());
  } else {
    const int local = groups.node->world_size(), nodes = groups.across->world_size();
    // Hop 1, within the node: to local peer l, the chunks of ranks
    // n * local + l for every node n.
    out_bytes.resize(static_cast<size_t>(qb * nodes * local));
    for (int l = 0; l < local; ++l)
      for (int n = 0; n < nodes; ++n)
        quantize(chunk_of(n * local + l), dtype, chunk, kBits,
                 out_bytes.data() + (static_cast<int64_t>(l) * nodes + n) * qb);
    DSCORE_RETURN_IF_ERROR(exchange(*groups.node, out_bytes, in_bytes, qb * nodes, device));
    // This node's sum for each node's rank at my local index, quantized again.
    std::vector<float> node_sum(static_cast<size_t>(chunk));
    std::vector<char> hop2(static_cast<size_t>(qb * nodes));
    for (int n = 0; n < nodes; ++n) {
      std::fill(node_sum.begin(), node_sum.end(), 0.0f);
      for (int l = 0; l < local; ++l)
        dequantize_add(in_bytes.data() + (static_cast<int64_t>(l) * nodes + n) * qb, chunk, kBits,
                       node_sum.data());
      quantize(node_sum.data(), DSCORE_DTYPE_F32, chunk, kBits, hop2.data() + n * qb);
    }
    // Hop 2, across nodes: node n's sum to the rank of node n.
    DSCORE_RETURN_IF_ERROR(exchange(*groups.across, hop2, in_bytes, qb, device));
    for (int n = 0; n < nodes; ++n)
      dequantize_add(in_bytes.data() + n * qb, chunk, kBits, sum.data());
  }
  if (op == DSCORE_REDUCE_AVG)
    for (float& v : sum) v /= static_cast<float>(world);
  tensor::convert(sum.data(), DSCORE_DTYPE_F32, out, dtype, chunk);
  return Status::Ok();
}

}  // namespace dscore::zero
