// compressed_allreduce (see compressed_allreduce.h), in DeepSpeed's order:
// worker compensation and compression, all-to-all of sign chunks and
// all-gather of worker scales, server averaging + compensation +
// compression of this rank's chunk, all-gather of server signs and scales,
// reconstruction. Scales are L2 norms / sqrt(elements), computed in double.
#include "compressed_allreduce.h"

#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace dscore::onebit {
namespace {

// A 1-D view of `numel` elements of `dtype` for a communicator call.
struct View {
  int64_t shape[1];
  dscore_tensor tensor{};
  View(void* data, dscore_dtype dtype, int64_t numel) : shape{numel} {
    tensor.struct_size = sizeof tensor;
    tensor.data = data;
    tensor.dtype = dtype;
    tensor.device_type = DSCORE_DEVICE_CPU;
    tensor.ndim = 1;
    tensor.shape = shape;
    tensor.numel = numel;
    tensor.name = "onebit compressed allreduce";
  }
};

void check(dscore_status status, const char* collective) {
  if (status == DSCORE_OK) return;
  // The communicator recorded its own message; keep it and say who asked.
  sdk::HostRef().log(DSCORE_LOG_ERROR, "onebit",
                     std::string("compressed allreduce: ") + collective + " failed");
  throw sdk::Reported{status};
}

// ||x|| / sqrt(n), DeepSpeed's scale.
float scale_of(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(std::sqrt(sum) / std::sqrt(static_cast<double>(n)));
}

// x -> signs (packed into `bits`), error = x - scale * sign(x).
float compress(const float* x, int64_t n, uint8_t* bits, float* error) {
  const float scale = scale_of(x, n);
  pack_signs(x, n, bits);
  for (int64_t i = 0; i < n; ++i) error[i] = x[i] - scale * sign_of(bits, i);
  return scale;
}

void all_to_all(const dscore_communicator& comm, uint8_t* send, uint8_t* recv, int64_t bytes) {
  View s(send, DSCORE_DTYPE_U8, bytes), r(recv, DSCORE_DTYPE_U8, bytes);
  if (comm.vtable->all_to_all != nullptr) {
    check(comm.vtable->all_to_all(comm.comm, &s.tensor, &r.tensor, nullptr), "all_to_all");
    return;
  }
  // A backend without all_to_all: gather every rank's whole sign buffer and
  // keep the chunks addressed to this rank (W times the bytes, same result).
  const int64_t chunk = bytes / comm.world_size;
  std::vector<uint8_t> everything(static_cast<size_t>(bytes) * comm.world_size);
  View all(everything.data(), DSCORE_DTYPE_U8, bytes * comm.world_size);
  check(comm.vtable->allgather(comm.comm, &s.tensor, &all.tensor, nullptr), "allgather");
  for (int w = 0; w < comm.world_size; ++w)
    std::copy_n(everything.data() + w * bytes + comm.rank * chunk, chunk, recv + w * chunk);
}

void allgather(const dscore_communicator& comm, void* send, void* recv, dscore_dtype dtype,
               int64_t count, const char* what) {
  View s(send, dtype, count), r(recv, dtype, count * comm.world_size);
  check(comm.vtable->allgather(comm.comm, &s.tensor, &r.tensor, nullptr), what);
}

}  // namespace

int64_t padded_size(int64_t numel, int world_size) {
  const int64_t divider = std::lcm<int64_t>(world_size, 8);
  const int64_t unit = world_size * divider;
  return (numel + unit - 1) / unit * unit;
}

void pack_signs(const float* values, int64_t count, uint8_t* bits) {
  for (int64_t byte = 0; byte < count / 8; ++byte) {
    uint8_t b = 0;
    for (int k = 0; k < 8; ++k) {
      const float v = values[byte * 8 + k];
      b = static_cast<uint8_t>((b << 1) | (v >= 0.0f || std::isnan(v) ? 1 : 0));
    }
    bits[byte] = b;
  }
}

int64_t compressed_bytes(int64_t numel, int world_size) {
  const int64_t n = padded_size(numel, world_size);
  return n / 8 + n / 8 / world_size + 2 * static_cast<int64_t>(sizeof(float));
}

void compressed_allreduce(const dscore_communicator& comm, float* m, int64_t numel,
                          ErrorFeedback& errors) {
  const int world = comm.world_size;
  const int64_t n = padded_size(numel, world);
  const int64_t chunk = n / world;  // server chunk: elements, a multiple of 8
  if (static_cast<int64_t>(errors.worker.size()) != n) {
    errors.worker.assign(static_cast<size_t>(n), 0.0f);
    errors.server.assign(static_cast<size_t>(chunk), 0.0f);
  }
  // Worker: x = m (zero-padded) + e_w, compressed to signs and one scale.
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  std::copy_n(m, numel, x.data());
  for (int64_t i = 0; i < n; ++i) x[i] += errors.worker[i];
  std::vector<uint8_t> signs(static_cast<size_t>(n / 8)), recv_signs(signs.size());
  float worker_scale = compress(x.data(), n, signs.data(), errors.worker.data());

  // Phase 1: chunk j of every rank's signs to rank j; every worker scale to all.
  all_to_all(comm, signs.data(), recv_signs.data(), n / 8);
  std::vector<float> worker_scales(static_cast<size_t>(world));
  allgather(comm, &worker_scale, worker_scales.data(), DSCORE_DTYPE_F32, 1, "allgather (scales)");

  // Server, for this rank's chunk: the average of the workers' compressed
  // values, compensated with the server error, compressed again.
  const float inverse_world = static_cast<float>(1.0 / world);
  std::vector<float> y(static_cast<size_t>(chunk), 0.0f);
  for (int w = 0; w < world; ++w) {
    const float weight = worker_scales[w] * inverse_world;
    const uint8_t* bits = recv_signs.data() + w * (chunk / 8);
    for (int64_t i = 0; i < chunk; ++i) y[i] += sign_of(bits, i) * weight;
  }
  for (int64_t i = 0; i < chunk; ++i) y[i] += errors.server[i];
  std::vector<uint8_t> server_signs(static_cast<size_t>(chunk / 8));
  float server_scale = compress(y.data(), chunk, server_signs.data(), errors.server.data());

  // Phase 2: every chunk's server signs and scale to every rank.
  std::vector<uint8_t> all_server_signs(static_cast<size_t>(n / 8));
  std::vector<float> server_scales(static_cast<size_t>(world));
  allgather(comm, server_signs.data(), all_server_signs.data(), DSCORE_DTYPE_U8, chunk / 8,
            "allgather (server signs)");
  allgather(comm, &server_scale, server_scales.data(), DSCORE_DTYPE_F32, 1,
            "allgather (server scales)");
  for (int64_t i = 0; i < numel; ++i)
    m[i] = server_scales[i / chunk] * sign_of(all_server_signs.data(), i);
}

}  // namespace dscore::onebit
