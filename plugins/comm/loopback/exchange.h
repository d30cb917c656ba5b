// The meeting point of one loopback communicator's ranks (threads of one
// process): each rank posts what it brings to a collective in its slot,
// everyone meets at a barrier, reads what it needs from the others' slots,
// and meets again before anyone returns, so no rank reuses a buffer another
// still reads. The barriers carry the deadline: a rank that never arrives is
// named. Point-to-point messages go through per-pair mailboxes.
#pragma once

#include <dscore/comm.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dscore::loopback {

// What one rank brings to the collective in flight.
struct Posted {
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t numel = 0;
  dscore_dtype dtype = DSCORE_DTYPE_INVALID;
  int32_t color = 0, key = 0;                        // split
  const dscore_all_to_all_layout* layout = nullptr;  // all_to_all_v
  std::shared_ptr<class Exchange> made;              // split: the group the leader formed
};

class Exchange {
 public:
  explicit Exchange(int world);

  int world() const { return world_; }
  Posted& slot(int rank) { return slots_[static_cast<size_t>(rank)]; }

  // Every rank calls it; returns when all have (OK), when `timeout_ms`
  // passes (DEADLINE_EXCEEDED naming the ranks that did not arrive; the
  // exchange is then aborted) or when it is aborted (UNAVAILABLE). `what`
  // names the collective in messages. Sets *message on failure.
  dscore_status meet(int rank, const char* what, int64_t timeout_ms, std::string* message);
  void abort(const std::string& reason);

  // Point to point: send copies into the (from, to) mailbox and returns;
  // receive waits for the next message of that pair.
  void send(int from, int to, const void* data, size_t bytes);
  dscore_status receive(int from, int to, void* data, size_t bytes, int64_t timeout_ms,
                        std::string* message);

 private:
  const int world_;
  std::vector<Posted> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t generation_ = 0;
  std::vector<bool> arrived_;
  int arrived_count_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<std::deque<std::vector<unsigned char>>> mailboxes_;  // [from * world + to]
};

}  // namespace dscore::loopback
