// Ulysses sequence parallelism for the decoders (DeepSpeed's
// DistributedAttention): each rank of the sequence group computes the
// token-wise layers on its slice of every sample's sequence, and attention
// on all of the sequence for its share of the heads; two all-to-alls over
// the group the host lends (host->communicator(ctx,
// DSCORE_GROUP_SEQUENCE_PARALLEL)) move between the two layouts.
#pragma once

#include <dscore/comm.h>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "host_tensor.h"

namespace dscore::transformer {

// Throws INVALID_ARGUMENT naming the fix unless `sp` ranks can split the
// model's sequence: its tokens divide evenly, and so do this rank's heads
// (and key/value heads, so none is repeated), on the CPU.
inline void check_sequence_parallel(const char* model, int64_t sp, int64_t rank, int64_t tokens,
                                    int64_t heads, int64_t kv_heads, const std::string& device) {
  const std::string m = model;
  if (rank < 0 || rank >= sp)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, m + ": sequence_parallel_rank " +
                                                  std::to_string(rank) + " is outside 0.." +
                                                  std::to_string(sp - 1));
  if (sp == 1) return;
  if (tokens % sp != 0)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     m + ": sequence_parallel_size " + std::to_string(sp) +
                         " does not divide the block_size " + std::to_string(tokens) +
                         ": each rank computes an equal slice of every sample; choose a size "
                         "that divides it");
  if (heads % sp != 0 || kv_heads % sp != 0)
    throw sdk::Error(
        DSCORE_INVALID_ARGUMENT,
        m + ": sequence_parallel_size " + std::to_string(sp) +
            " does not divide the attention heads each rank holds (" + std::to_string(heads) +
            (kv_heads != heads ? ", key/value heads " + std::to_string(kv_heads) : "") +
            ", after tensor parallelism): Ulysses gives each rank whole heads; choose a size "
            "that divides them");
  if (device != "cpu")
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     m + ": sequence parallelism computes on the CPU only in this release; set "
                         "the run's \"device\": \"cpu\" or sequence_parallel_size 1");
}

// Which part of each sample's sequence a rank computes.
struct SequenceSlice {
  int64_t size = 1;  // ranks in the group
  int64_t rank = 0;
  int64_t tokens = 0;  // the whole sequence, T
  int64_t local() const { return tokens / size; }
  int64_t first() const { return rank * local(); }
  bool split() const { return size > 1; }
};

// The two layouts of a packed activation (rows of `parts` blocks of W
// channels each: q|k|v has 3, an attention output 1), and the all-to-all
// between them, on host memory (float, or double for the gradient checks):
//   tokens: (B, T / sp, parts x W): this rank's tokens, every head
//   heads:  (B, T, parts x W / sp): every token, this rank's heads (the
//           ranks' heads in order: rank j holds channels [j W/sp, (j+1) W/sp)
//           of each part)
class SequenceParallelGroup {
 public:
  SequenceParallelGroup(sdk::HostRef host, const char* model) : host_(host), model_(model) {}

  template <class X>
  void to_heads(const X* tokens, X* heads, int64_t B, const SequenceSlice& s, int64_t W,
                int64_t parts) {
    const int64_t sp = s.size, Tl = s.local(), Ws = W / sp, row = parts * Ws;
    const int64_t chunk = B * Tl * row;
    X* send = buffer<X>(&send_, chunk * sp);
    X* recv = buffer<X>(&recv_, chunk * sp);
    // Chunk j (to rank j): this rank's tokens, rank j's heads.
    for (int64_t j = 0; j < sp; ++j)
      for (int64_t n = 0; n < B * Tl; ++n)
        for (int64_t p = 0; p < parts; ++p)
          std::memcpy(&send[(j * chunk + n * row + p * Ws)],
                      tokens + n * parts * W + p * W + j * Ws, sizeof(X) * Ws);
    exchange(send, recv, chunk * sp);
    // Chunk i (from rank i): rank i's tokens, this rank's heads.
    for (int64_t i = 0; i < sp; ++i)
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(heads + (b * s.tokens + i * Tl) * row, &recv[(i * chunk + b * Tl * row)],
                    sizeof(X) * Tl * row);
  }

  template <class X>
  void to_tokens(const X* heads, X* tokens, int64_t B, const SequenceSlice& s, int64_t W,
                 int64_t parts) {
    const int64_t sp = s.size, Tl = s.local(), Ws = W / sp, row = parts * Ws;
    const int64_t chunk = B * Tl * row;
    X* send = buffer<X>(&send_, chunk * sp);
    X* recv = buffer<X>(&recv_, chunk * sp);
    // Chunk i (to rank i): rank i's tokens, this rank's heads.
    for (int64_t i = 0; i < sp; ++i)
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(&send[(i * chunk + b * Tl * row)], heads + (b * s.tokens + i * Tl) * row,
                    sizeof(X) * Tl * row);
    exchange(send, recv, chunk * sp);
    // Chunk j (from rank j): this rank's tokens, rank j's heads.
    for (int64_t j = 0; j < sp; ++j)
      for (int64_t n = 0; n < B * Tl; ++n)
        for (int64_t p = 0; p < parts; ++p)
          std::memcpy(tokens + n * parts * W + p * W + j * Ws,
                      &recv[(j * chunk + n * row + p * Ws)], sizeof(X) * Ws);
  }

 private:
  const dscore_communicator* all_to_all() const {
    const dscore_communicator* c = host_.communicator(DSCORE_GROUP_SEQUENCE_PARALLEL);
    if (c == nullptr || c->vtable == nullptr)
      throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                       std::string(model_) +
                           ": the model splits each sample's sequence but the host lends no "
                           "sequence-parallel group (run it through the engine with "
                           "sequence_parallel_size set)");
    if (c->vtable->all_to_all == nullptr)
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       std::string(model_) +
                           ": the comm backend has no all_to_all, which sequence parallelism "
                           "needs; use the \"local\" or \"mpi\" backend");
    return c;
  }
  template <class X>
  static X* buffer(std::vector<double>* v, int64_t n) {
    v->resize(static_cast<size_t>((n * static_cast<int64_t>(sizeof(X)) + 7) / 8));
    return reinterpret_cast<X*>(v->data());
  }
  template <class X>
  void exchange(X* send, X* recv, int64_t n) {
    static_assert(std::is_same_v<X, float> || std::is_same_v<X, double>);
    const dscore_dtype dtype = std::is_same_v<X, float> ? DSCORE_DTYPE_F32 : DSCORE_DTYPE_F64;
    const dscore_communicator* c = all_to_all();
    dscore_tensor s = host_tensor(send, dtype, n), r = host_tensor(recv, dtype, n);
    sdk::check(c->vtable->all_to_all(c->comm, &s, &r, nullptr));
  }

  sdk::HostRef host_;
  const char* model_;
  std::vector<double> send_, recv_;  // scratch, reused
};

// A runner's exchange between the layouts above through its backend's
// (HostBackend::sequence_to_heads/tokens); a backend without them (CUDA,
// the counting backend) cannot run sequence-split.
enum class SequenceLayout { kHeads, kTokens };
template <class Backend, class T>
void sequence_exchange(Backend& backend, SequenceLayout to, const T* from, T* out, int64_t B,
                       const SequenceSlice& s, int64_t W, int64_t parts, const char* model) {
  if constexpr (requires { backend.sequence_to_heads(from, out, B, s, W, parts); }) {
    if (to == SequenceLayout::kHeads)
      backend.sequence_to_heads(from, out, B, s, W, parts);
    else
      backend.sequence_to_tokens(from, out, B, s, W, parts);
  } else {
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     std::string(model) + ": sequence parallelism computes on the CPU only");
  }
}

}  // namespace dscore::transformer
