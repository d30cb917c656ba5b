// A comm thread: collectives submitted in order run one at a time on a
// dedicated thread, so reduction overlaps the rest of backward and
// parameter gathers overlap compute (overlap_comm, ZeRO-3 prefetch). Every
// call into the comm backend goes through here (or happens while the
// stream is idle), which is what MPI_THREAD_SERIALIZED asks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/base/status.h"

namespace dscore::comm {

class CommStream {
 public:
  struct State;
  using Ticket = std::shared_ptr<State>;
  using Task = std::function<Status()>;

  CommStream();
  ~CommStream();  // finishes queued work, then joins
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Queue `task`. Once a task fails, the failure is sticky: later tasks are
  // not run and report the same status (the job is going down anyway).
  Ticket submit(Task task);
  Status wait(const Ticket& ticket);
  // Wait for everything queued so far.
  Status synchronize();
  // submit + wait.
  Status run(Task task) { return wait(submit(std::move(task))); }
  bool idle() const;
  // Nanoseconds callers have spent in submit/wait/synchronize/run.
  int64_t blocked_ns() const { return blocked_ns_.load(); }

 private:
  void loop();
  mutable std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<std::pair<Task, Ticket>> queue_;
  Ticket last_;
  Status sticky_;
  bool stopping_ = false;
  bool busy_ = false;
  std::atomic<int64_t> blocked_ns_{0};
  std::thread thread_;
};

struct CommStream::State {
  bool done = false;
  Status status;
};

}  // namespace dscore::comm
