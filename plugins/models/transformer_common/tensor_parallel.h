// Tensor parallelism for the decoders (Megatron's split, as DeepSpeed's
// AutoTP shards a Hugging Face model): what a model checks of its split, and
// the collectives its runner calls on the tensor-parallel group the host
// lends (host->communicator(ctx, DSCORE_GROUP_TENSOR_PARALLEL)).
#pragma once

#include <dscore/comm.h>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "host_tensor.h"

namespace dscore::transformer {

// Throws INVALID_ARGUMENT naming the fix unless `tp` ranks can split the
// model: the heads (and the KV heads, so none is repeated) divide evenly,
// every rank holds at least one vocabulary row, and it computes on the CPU.
inline void check_tensor_parallel(const char* model, int64_t tp, int64_t rank, int64_t heads,
                                  int64_t kv_heads, int64_t vocab, const std::string& device) {
  const std::string m = model;
  if (rank < 0 || rank >= tp)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, m + ": tensor_parallel_rank " + std::to_string(rank) +
                                                  " is outside 0.." + std::to_string(tp - 1));
  if (tp == 1) return;
  if (heads % tp != 0 || kv_heads % tp != 0)
    throw sdk::Error(
        DSCORE_INVALID_ARGUMENT,
        m + ": tensor_parallel.autotp_size " + std::to_string(tp) +
            " does not divide the attention heads (" + std::to_string(heads) +
            (kv_heads != heads ? ", key/value heads " + std::to_string(kv_heads) : "") +
            "): each rank computes whole heads; choose a size that divides them");
  if (vocab < tp)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, m + ": " + std::to_string(vocab) +
                                                  " vocabulary rows cannot be split over " +
                                                  std::to_string(tp) + " ranks");
  if (device != "cpu")
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     m + ": tensor parallelism computes on the CPU only in this release; set "
                         "the run's \"device\": \"cpu\" or tensor_parallel.autotp_size 1");
}

// The tensor-parallel group's collectives, blocking, on host memory.
class TensorParallelGroup {
 public:
  TensorParallelGroup(sdk::HostRef host, const char* model) : host_(host), model_(model) {}

  void sum(float* data, int64_t n) const {
    allreduce(data, n, DSCORE_DTYPE_F32, DSCORE_REDUCE_SUM);
  }
  void sum(double* data, int64_t n) const {
    allreduce(data, n, DSCORE_DTYPE_F64, DSCORE_REDUCE_SUM);
  }
  void max(double* data, int64_t n) const {
    allreduce(data, n, DSCORE_DTYPE_F64, DSCORE_REDUCE_MAX);
  }

 private:
  void allreduce(void* data, int64_t n, dscore_dtype dtype, dscore_reduce_op op) const {
    const dscore_communicator* comm = host_.communicator(DSCORE_GROUP_TENSOR_PARALLEL);
    if (comm == nullptr || comm->vtable == nullptr || comm->vtable->allreduce == nullptr)
      throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                       std::string(model_) +
                           ": the model is split for tensor parallelism but the host lends no "
                           "tensor-parallel group (run it through the engine with "
                           "tensor_parallel.autotp_size set)");
    dscore_tensor t = host_tensor(data, dtype, n);
    sdk::check(comm->vtable->allreduce(comm->comm, &t, &t, op, nullptr));
  }

  sdk::HostRef host_;
  const char* model_;
};

// A runner's calls into its backend's tensor-parallel paths: a backend
// without them (CUDA, the counting backend) cannot run split.
[[noreturn]] inline void cpu_only(const char* model) {
  throw sdk::Error(DSCORE_UNIMPLEMENTED,
                   std::string(model) + ": tensor parallelism computes on the CPU only");
}
// The group's sum in place.
template <class Backend, class T>
void group_sum(Backend& backend, T* data, int64_t n, const char* model) {
  if constexpr (requires { backend.tensor_parallel_sum(data, n); })
    backend.tensor_parallel_sum(data, n);
  else
    cpu_only(model);
}
// The LM head over this rank's vocabulary rows [v0, v0 + rows) of V
// (cpu/vocab_parallel.h); dx null: the loss only.
template <class Backend, class T>
double vocab_parallel_head(Backend& backend, T* dx, T* dw, const T* x, const T* w,
                           const int32_t* targets, int64_t N, int64_t C, int64_t rows, int64_t v0,
                           int64_t V, double grad_scale, const char* model) {
  if constexpr (requires {
                  backend.vocab_parallel_head(dx, dw, x, w, targets, N, C, rows, v0, V, grad_scale);
                })
    return backend.vocab_parallel_head(dx, dw, x, w, targets, N, C, rows, v0, V, grad_scale);
  else
    cpu_only(model);
}

// Logits of this rank's vocabulary rows [v0, v0 + rows) of V (`local`,
// count x rows) made whole on every rank of the group: each places its
// columns in zeros and the group sums them (in T, the group's type).
template <class Backend>
void gather_vocab_logits(Backend& backend, const float* local, int64_t count, int64_t rows,
                         int64_t v0, int64_t V, float* whole, const char* model) {
  using T = typename Backend::Scalar;
  std::vector<T> sum(static_cast<size_t>(count * V), T{0});
  for (int64_t i = 0; i < count; ++i)
    for (int64_t v = 0; v < rows; ++v) sum[i * V + v0 + v] = static_cast<T>(local[i * rows + v]);
  group_sum(backend, sum.data(), count * V, model);
  for (int64_t k = 0; k < count * V; ++k) whole[k] = static_cast<float>(sum[k]);
}

}  // namespace dscore::transformer
