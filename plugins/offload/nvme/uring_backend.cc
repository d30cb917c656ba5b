// The io_uring backend: one ring of queue_depth entries. Transfers beyond
// the ring's room wait in `pending_`; each completion frees a slot, a short
// transfer goes back with its remainder. Requests that lie inside a
// registered buffer use read_fixed/write_fixed.
#include <errno.h>
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>

#include "backend.h"

namespace dscore::nvme {
namespace {

constexpr size_t kMaxSqeBytes = size_t{1} << 30;     // one SQE moves at most this
constexpr size_t kMaxFixedBuffer = size_t{1} << 30;  // the kernel's limit per buffer

class UringBackend : public Backend {
 public:
  explicit UringBackend(const BackendOptions& options)
      : depth_(options.queue_depth), single_submit_(options.single_submit) {
    init_error_ = -io_uring_queue_init(depth_, &ring_, 0);
  }
  int init_error() const { return init_error_; }  // errno, 0 when the ring exists
  ~UringBackend() override {
    if (init_error_ != 0) return;
    while (on_ring_ > 0 || !pending_.empty()) progress(-1);
    for (Transfer* t : pending_) delete t;
    io_uring_queue_exit(&ring_);
  }
  const char* name() const override { return "io_uring"; }

  void submit(std::vector<Transfer> transfers) override {
    for (Transfer& t : transfers) {
      t.fixed_index = fixed_index_of(t.buffer, t.bytes);
      in_flight_[t.file] += 1;
      pending_.push_back(new Transfer(t));
    }
    push();
  }

  bool wait(size_t min_count, int64_t timeout_ms, size_t capacity,
            std::vector<Completion>* out) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    reap(false);
    while (done_.size() < min_count && (on_ring_ > 0 || !pending_.empty())) {
      int64_t left = -1;
      if (timeout_ms >= 0) {
        left = std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - std::chrono::steady_clock::now())
                   .count();
        if (left <= 0) break;
      }
      progress(left);
    }
    const bool ready = done_.size() >= min_count;
    while (!done_.empty() && out->size() < capacity) {
      out->push_back(done_.front());
      done_.pop_front();
    }
    return ready;
  }

  void drain(int64_t file) override {
    for (;;) {
      auto it = in_flight_.find(file);
      if (it == in_flight_.end() || it->second == 0) return;
      progress(-1);
    }
  }

  std::string register_buffers(void* const* buffers, const size_t* sizes, size_t count) override {
    while (on_ring_ > 0 || !pending_.empty()) progress(-1);  // no fixed I/O across the swap
    if (!fixed_.empty()) io_uring_unregister_buffers(&ring_);
    fixed_.clear();
    std::vector<iovec> iov;
    std::string skipped;
    for (size_t i = 0; i < count; ++i) {
      if (buffers[i] == nullptr || sizes[i] == 0) continue;
      if (sizes[i] > kMaxFixedBuffer) {
        skipped = "buffers over 1 GiB are not registered (the kernel's limit)";
        continue;
      }
      iov.push_back({buffers[i], sizes[i]});
    }
    if (iov.empty()) return skipped;
    const int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0)
      return std::string("io_uring_register_buffers failed (") + std::strerror(-rc) +
             "; RLIMIT_MEMLOCK too low?): transfers use unregistered buffers";
    for (size_t i = 0; i < iov.size(); ++i) {
      const auto start = reinterpret_cast<uintptr_t>(iov[i].iov_base);
      fixed_[start] = {start + iov[i].iov_len, static_cast<int>(i)};
    }
    return skipped;
  }

 private:
  struct Region {
    uintptr_t end;
    int index;
  };

  int fixed_index_of(const char* buffer, size_t bytes) const {
    if (fixed_.empty()) return -1;
    const auto start = reinterpret_cast<uintptr_t>(buffer);
    auto it = fixed_.upper_bound(start);
    if (it == fixed_.begin()) return -1;
    --it;
    return start + bytes <= it->second.end ? it->second.index : -1;
  }

  // Put pending transfers on the ring while it has room, and submit them.
  void push() {
    unsigned prepared = 0;
    while (!pending_.empty() && on_ring_ < depth_) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;
      Transfer* t = pending_.front();
      pending_.pop_front();
      prepare(sqe, *t);
      on_ring_ += 1;
      prepared += 1;
      if (single_submit_) submit_ring();
    }
    if (prepared > 0 && !single_submit_) submit_ring();
  }

  void submit_ring() {
    for (;;) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0 || (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)) return;
      if (rc != -EINTR) reap(false);  // the kernel wants completions reaped first
    }
  }

  static void prepare(io_uring_sqe* sqe, const Transfer& t) {
    char* at = t.buffer + t.done;
    const auto len = static_cast<unsigned>(std::min(t.bytes - t.done, kMaxSqeBytes));
    const uint64_t off = t.offset + t.done;
    if (t.op == DSCORE_IO_READ) {
      if (t.fixed_index >= 0) {
        io_uring_prep_read_fixed(sqe, t.fd, at, len, off, t.fixed_index);
      } else {
        io_uring_prep_read(sqe, t.fd, at, len, off);
      }
    } else {
      if (t.fixed_index >= 0) {
        io_uring_prep_write_fixed(sqe, t.fd, at, len, off, t.fixed_index);
      } else {
        io_uring_prep_write(sqe, t.fd, at, len, off);
      }
    }
    io_uring_sqe_set_data(sqe, const_cast<Transfer*>(&t));
  }

  // Wait (timeout_ms < 0: no limit) for one completion, then reap all.
  void progress(int64_t timeout_ms) {
    push();
    if (on_ring_ == 0) return;
    io_uring_cqe* cqe = nullptr;
    int rc;
    if (timeout_ms < 0) {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } else {
      __kernel_timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000};
      rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    }
    (void)rc;  // -ETIME / -EINTR: reap what is there
    reap(true);
  }

  void reap(bool resubmit) {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      auto* t = static_cast<Transfer*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      on_ring_ -= 1;
      Completion c;
      if (advance(*t, res, &c)) {
        done_.push_back(c);
        in_flight_[t->file] -= 1;
        delete t;
      } else {
        pending_.push_front(t);  // the remainder, first in line
      }
    }
    if (resubmit) push();
  }

  io_uring ring_{};
  int init_error_ = 0;
  unsigned depth_;
  bool single_submit_;
  unsigned on_ring_ = 0;
  std::deque<Transfer*> pending_;
  std::deque<Completion> done_;
  std::map<int64_t, size_t> in_flight_;
  std::map<uintptr_t, Region> fixed_;  // registered buffers by start address
};

}  // namespace

std::unique_ptr<Backend> make_uring_backend(const BackendOptions& options, std::string* why) {
  auto backend = std::make_unique<UringBackend>(options);
  if (const int e = backend->init_error(); e != 0) {
    *why = std::string("io_uring_queue_init failed: ") + std::strerror(e) +
           (e == ENOSYS  ? " (the kernel has no io_uring)"
            : e == EPERM ? " (forbidden: kernel.io_uring_disabled or a seccomp filter)"
                         : "");
    return nullptr;
  }
  return backend;
}

}  // namespace dscore::nvme
