// The expert-parallel group's collectives for ExpertExchange
// (expert_exchange.h): the communicator the host lends
// (host->communicator(ctx, DSCORE_GROUP_EXPERT_PARALLEL)), blocking, on
// host memory, with what they moved counted (the model's collective_bytes).
#pragma once

#include <dscore/comm.h>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../host_tensor.h"
#include "expert_exchange.h"

namespace dscore::transformer::moe {

class ExpertParallelGroup {
 public:
  ExpertParallelGroup(sdk::HostRef host, const char* model) : host_(host), model_(model) {}

  // The all-to-all of per-peer counts.
  AllToAllCounts counts() {
    return [this](const int64_t* send, int64_t* recv, int64_t n) {
      const dscore_communicator* c = comm();
      if (c->vtable->all_to_all == nullptr) missing("all_to_all");
      const int64_t total = n * world();
      dscore_tensor s = host_tensor(const_cast<int64_t*>(send), DSCORE_DTYPE_I64, total);
      dscore_tensor r = host_tensor(recv, DSCORE_DTYPE_I64, total);
      sdk::check(c->vtable->all_to_all(c->comm, &s, &r, nullptr));
      count(total * static_cast<int64_t>(sizeof(int64_t)));
    };
  }
  // The rows, with variable counts.
  template <class T>
  AllToAllV<T> rows() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    return [this](const T* send, T* recv, const AllToAllLayout& l) {
      const dscore_communicator* c = comm();
      if (c->vtable->struct_size < offsetof(dscore_comm_vtable, all_to_all_v) + sizeof(void*) ||
          c->vtable->all_to_all_v == nullptr)
        missing("all_to_all_v");
      const dscore_dtype dtype = std::is_same_v<T, float> ? DSCORE_DTYPE_F32 : DSCORE_DTYPE_F64;
      int64_t sent = 0, received = 0;
      for (size_t p = 0; p < l.send_counts.size(); ++p) {
        sent = std::max(sent, l.send_offsets[p] + l.send_counts[p]);
        received = std::max(received, l.recv_offsets[p] + l.recv_counts[p]);
      }
      dscore_tensor s = host_tensor(const_cast<T*>(send), dtype, sent);
      dscore_tensor r = host_tensor(recv, dtype, received);
      const dscore_all_to_all_layout layout{sizeof(dscore_all_to_all_layout), l.send_counts.data(),
                                            l.send_offsets.data(), l.recv_counts.data(),
                                            l.recv_offsets.data()};
      sdk::check(c->vtable->all_to_all_v(c->comm, &s, &r, &layout, nullptr));
      count(sent * static_cast<int64_t>(sizeof(T)));
    };
  }

  int world() const { return comm()->world_size; }
  // The calls made and their bytes (each at its send buffer's size) since
  // the last reset.
  uint64_t calls() const { return calls_; }
  uint64_t bytes() const { return bytes_; }
  void reset_counts() { calls_ = bytes_ = 0; }

 private:
  const dscore_communicator* comm() const {
    const dscore_communicator* c = host_.communicator(DSCORE_GROUP_EXPERT_PARALLEL);
    if (c == nullptr || c->vtable == nullptr)
      throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                       std::string(model_) +
                           ": the model spreads its experts over ranks but the host lends no "
                           "expert-parallel group (run it through the engine with "
                           "expert_parallel.autoep_size set)");
    return c;
  }
  [[noreturn]] void missing(const char* call) const {
    throw sdk::Error(DSCORE_UNIMPLEMENTED, std::string(model_) + ": the comm backend has no " +
                                               call +
                                               ", which expert parallelism needs; use the "
                                               "\"local\", \"mpi\" or \"nccl\" backend");
  }
  void count(int64_t bytes) {
    calls_ += 1;
    bytes_ += static_cast<uint64_t>(bytes);
  }

  sdk::HostRef host_;
  const char* model_;
  uint64_t calls_ = 0, bytes_ = 0;
};

}  // namespace dscore::transformer::moe
