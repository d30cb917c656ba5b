#include "core/comm/comm_stream.h"

#include <chrono>

namespace dscore::comm {

CommStream::CommStream() : thread_([this] { loop(); }) {}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

CommStream::Ticket CommStream::submit(Task task) {
  // Counted as blocked too: waking the comm thread can hand it this
  // thread's core (fewer cores than threads), and the caller then waits
  // here while the comm thread works.
  const auto start = std::chrono::steady_clock::now();
  auto ticket = std::make_shared<State>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(task), ticket);
    last_ = ticket;
  }
  work_.notify_one();
  blocked_ns_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return ticket;
}

Status CommStream::wait(const Ticket& ticket) {
  if (!ticket) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return ticket->done; });
  blocked_ns_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return ticket->status;
}

Status CommStream::synchronize() {
  Ticket last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last = last_;
  }
  return wait(last);
}

bool CommStream::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.empty() && !busy_;
}

void CommStream::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    auto [task, ticket] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    Status status = sticky_;
    if (status.ok()) {
      lock.unlock();
      try {
        status = task();
      } catch (const std::exception& e) {
        status = internal_error(std::string("comm thread: ") + e.what());
      }
      lock.lock();
      if (!status.ok() && sticky_.ok()) sticky_ = status;
    }
    busy_ = false;
    ticket->status = status;
    ticket->done = true;
    done_.notify_all();
  }
}

}  // namespace dscore::comm
