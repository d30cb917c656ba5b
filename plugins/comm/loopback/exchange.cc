// Exchange (exchange.h): a generation-counted barrier with a deadline, and
// per-pair mailboxes.
#include "exchange.h"

#include <cstring>

namespace dscore::loopback {

Exchange::Exchange(int world)
    : world_(world),
      slots_(static_cast<size_t>(world)),
      arrived_(static_cast<size_t>(world), false),
      mailboxes_(static_cast<size_t>(world) * static_cast<size_t>(world)) {}

dscore_status Exchange::meet(int rank, const char* what, int64_t timeout_ms, std::string* message) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) {
    *message = std::string(what) + ": the communicator was aborted (" + abort_reason_ + ")";
    return DSCORE_UNAVAILABLE;
  }
  const uint64_t generation = generation_;
  arrived_[static_cast<size_t>(rank)] = true;
  if (++arrived_count_ == world_) {
    arrived_count_ = 0;
    arrived_.assign(arrived_.size(), false);
    ++generation_;
    changed_.notify_all();
    return DSCORE_OK;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const bool met =
      changed_.wait_until(lock, deadline, [&] { return generation_ != generation || aborted_; });
  if (met && generation_ != generation) return DSCORE_OK;
  if (!met) {
    std::string missing;
    for (int r = 0; r < world_; ++r)
      if (!arrived_[static_cast<size_t>(r)])
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    *message = std::string(what) + ": rank(s) " + missing + " did not arrive within " +
               std::to_string(timeout_ms) + " ms (comm.timeout_ms)";
    aborted_ = true;
    abort_reason_ = *message;
    changed_.notify_all();
    return DSCORE_DEADLINE_EXCEEDED;
  }
  *message = std::string(what) + ": the communicator was aborted (" + abort_reason_ + ")";
  return DSCORE_UNAVAILABLE;
}

void Exchange::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  changed_.notify_all();
}

void Exchange::send(int from, int to, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::lock_guard<std::mutex> lock(mutex_);
  mailboxes_[static_cast<size_t>(from * world_ + to)].emplace_back(p, p + bytes);
  changed_.notify_all();
}

dscore_status Exchange::receive(int from, int to, void* data, size_t bytes, int64_t timeout_ms,
                                std::string* message) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = mailboxes_[static_cast<size_t>(from * world_ + to)];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!changed_.wait_until(lock, deadline, [&] { return !box.empty() || aborted_; })) {
    *message = "recv: nothing from rank " + std::to_string(from) + " within " +
               std::to_string(timeout_ms) + " ms (comm.timeout_ms)";
    return DSCORE_DEADLINE_EXCEEDED;
  }
  if (box.empty()) {
    *message = "recv: the communicator was aborted (" + abort_reason_ + ")";
    return DSCORE_UNAVAILABLE;
  }
  std::vector<unsigned char> front = std::move(box.front());
  box.pop_front();
  if (front.size() != bytes) {
    *message = "recv: rank " + std::to_string(from) + " sent " + std::to_string(front.size()) +
               " bytes, this rank expected " + std::to_string(bytes);
    return DSCORE_INVALID_ARGUMENT;
  }
  std::memcpy(data, front.data(), bytes);
  return DSCORE_OK;
}

}  // namespace dscore::loopback
