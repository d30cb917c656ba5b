// The fallback backend: `threads` workers take transfers from one queue and
// run each with pread/pwrite to its end. Used where io_uring is unavailable
// (or DSCORE_NVME_BACKEND=threads).
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "backend.h"

namespace dscore::nvme {
namespace {

class ThreadBackend : public Backend {
 public:
  explicit ThreadBackend(const BackendOptions& options) {
    const unsigned n = options.threads == 0 ? 1 : options.threads;
    for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  const char* name() const override { return "threads"; }

  void submit(std::vector<Transfer> transfers) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Transfer& t : transfers) {
        in_flight_[t.file] += 1;
        queue_.push_back(t);
      }
    }
    work_cv_.notify_all();
  }

  bool wait(size_t min_count, int64_t timeout_ms, size_t capacity,
            std::vector<Completion>* out) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto enough = [&] { return done_.size() >= min_count || total_in_flight() == 0; };
    if (timeout_ms < 0) {
      done_cv_.wait(lock, enough);
    } else {
      done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), enough);
    }
    const bool ready = done_.size() >= min_count;
    while (!done_.empty() && out->size() < capacity) {
      out->push_back(done_.front());
      done_.pop_front();
    }
    return ready;
  }

  void drain(int64_t file) override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] {
      auto it = in_flight_.find(file);
      return it == in_flight_.end() || it->second == 0;
    });
  }

 private:
  size_t total_in_flight() const {
    size_t n = 0;
    for (const auto& [file, count] : in_flight_) n += count;
    return n;
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left to do
      Transfer t = queue_.front();
      queue_.pop_front();
      lock.unlock();
      Completion c = run_blocking(t);
      lock.lock();
      done_.push_back(c);
      in_flight_[t.file] -= 1;
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Transfer> queue_;
  std::deque<Completion> done_;
  std::map<int64_t, size_t> in_flight_;  // queued or running, per file
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<Backend> make_thread_backend(const BackendOptions& options) {
  return std::make_unique<ThreadBackend>(options);
}

}  // namespace dscore::nvme
