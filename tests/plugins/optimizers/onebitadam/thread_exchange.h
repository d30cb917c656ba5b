// An in-memory "job" of W ranks played by W threads of one test process: each
// rank gets its own dscore_communicator (comm.h) whose collectives meet the
// other threads' at a std::barrier. It counts the bytes each rank SENDS per
// collective, which is what the compressed-allreduce volume check reads.
// Implements allreduce (fp32 sum/avg), allgather, all_to_all, broadcast,
// reduce_scatter (fp32) and barrier; send/recv answer UNIMPLEMENTED.
#pragma once

#include <dscore/comm.h>

#include <barrier>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dscore::testing {

class ThreadExchange {
 public:
  explicit ThreadExchange(int world_size);
  ~ThreadExchange();
  ThreadExchange(const ThreadExchange&) = delete;
  ThreadExchange& operator=(const ThreadExchange&) = delete;

  int world_size() const { return world_size_; }
  // Rank r's communicator; valid while the exchange lives.
  const dscore_communicator* communicator(int rank) const;

  // Bytes rank `rank` has sent so far, per collective name ("allreduce",
  // "allgather", "all_to_all", ...), and in total.
  std::map<std::string, int64_t> bytes_sent(int rank) const;
  int64_t total_bytes_sent(int rank) const;
  void reset_counters();

  struct Rank;  // the dscore_comm behind each communicator (thread_exchange.cc)

 private:
  friend struct Rank;
  int world_size_;
  std::barrier<> barrier_;
  std::vector<const void*> slots_;  // each rank's send buffer during a collective
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<dscore_communicator> communicators_;
  mutable std::mutex mutex_;
};

}  // namespace dscore::testing
