// The two ways the nvme swapper moves data: io_uring (uring_backend.cc) and
// a pool of threads doing pread/pwrite (thread_backend.cc). Both run each
// Transfer to its end (retrying short transfers) and queue one Completion
// per Transfer. Called from one thread at a time (the ABI's rule), except
// that the thread pool's workers run inside it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transfer.h"

namespace dscore::nvme {

class Backend {
 public:
  virtual ~Backend() = default;  // waits for every transfer in flight
  virtual const char* name() const = 0;
  // Queue transfers; they start at once (up to the queue depth).
  virtual void submit(std::vector<Transfer> transfers) = 0;
  // Wait until at least min_count completions are ready (timeout_ms < 0: no
  // limit) or none can come any more; move up to `capacity` of them into
  // *out. Returns whether min_count were ready.
  virtual bool wait(size_t min_count, int64_t timeout_ms, size_t capacity,
                    std::vector<Completion>* out) = 0;
  // Block until no transfer of `file` is in flight (their completions stay
  // queued for wait()).
  virtual void drain(int64_t file) = 0;
  // Replace the registered buffer set (count 0 clears it). Only io_uring
  // uses it; a failure to register is not an error (I/O just does not use
  // fixed buffers), the returned text says why for the log ("" when fine).
  virtual std::string register_buffers(void* const* buffers, const size_t* sizes, size_t count) {
    (void)buffers;
    (void)sizes;
    (void)count;
    return "";
  }
};

struct BackendOptions {
  unsigned queue_depth = 8;
  unsigned threads = 1;
  bool single_submit = false;
};

// io_uring; nullptr with *why set (strerror text) when the kernel refuses a
// ring (ENOSYS, EPERM from seccomp, kernel.io_uring_disabled).
std::unique_ptr<Backend> make_uring_backend(const BackendOptions& options, std::string* why);
std::unique_ptr<Backend> make_thread_backend(const BackendOptions& options);

}  // namespace dscore::nvme
