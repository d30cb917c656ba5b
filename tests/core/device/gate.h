// A gate a stream's task can block on until the test opens it: how the
// device tests make a producer late on purpose, so ordering is shown by
// construction rather than by timing.
#pragma once

#include <condition_variable>
#include <mutex>

namespace dscore::device::testing {

class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace dscore::device::testing
