// The reference disk probe (disk_probe.h): one O_DIRECT file, written then
// read sequentially with `queue_depth` requests of `block_size` in flight,
// through io_uring or, where the kernel refuses io_uring, threads doing
// pread/pwrite. Deliberately independent of the Swapper and the nvme
// plugin, so it measures the file system and nothing of ours.
#include "core/offload/disk_probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/offload/offload_util.h"

namespace dscore::offload {
namespace {

constexpr uint64_t kAlignment = 4096;  // O_DIRECT: addresses, offsets and sizes

std::string errno_with_number(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

Status request_error(const std::string& path, bool write, uint64_t offset, uint64_t bytes,
                     int err) {
  std::string message = std::string(write ? "write" : "read") + " of " + std::to_string(bytes) +
                        " bytes at offset " + std::to_string(offset) + " of " + path +
                        " failed: " + errno_with_number(err);
  if (err == ENOSPC) message += "; free space in the folder or probe a smaller size";
  return io_error(message);
}

Status short_transfer(const std::string& path, bool write, uint64_t offset, uint64_t bytes,
                      uint64_t done) {
  return io_error(
      std::string("short ") + (write ? "write" : "read") + " at offset " + std::to_string(offset) +
      " of " + path + ": " + std::to_string(done) + " of " + std::to_string(bytes) + " bytes" +
      (write ? " (a full disk?); free space in the folder or probe a smaller size" : ""));
}

// The probe file: created under a unique name, always removed.
class ProbeFile {
 public:
  ~ProbeFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  Status create(const std::string& folder) {
    std::string name = folder + "/.dscore_disk_probe.XXXXXX";
    int fd = ::mkstemp(name.data());
    if (fd < 0)
      return io_error("cannot create a file in " + folder + ": " + errno_with_number(errno) +
                      "; give a folder that exists and is writable");
    path_ = name;
    ::close(fd);
    fd_ = ::open(path_.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd_ < 0) {
      const int err = errno;
      if (err == EINVAL)
        return invalid_argument("the file system of " + folder +
                                " does not support O_DIRECT; give a folder on a disk (ext4, xfs, "
                                "btrfs), not tmpfs or a network share");
      return io_error("cannot open " + path_ + " with O_DIRECT: " + errno_with_number(err));
    }
    return Status::Ok();
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

struct Pass {
  int fd;
  const std::string* path;
  bool write;
  uint64_t file_bytes;
  uint64_t block;
  int depth;
  char* buffers;  // depth x block bytes, slot i at buffers + i * block
};

// Every block of the file in order, up to `depth` in flight.
Status io_uring_pass(io_uring* ring, const Pass& p, bool fixed) {
  std::vector<int> free_slots(p.depth);
  for (int i = 0; i < p.depth; ++i) free_slots[i] = p.depth - 1 - i;
  std::vector<uint64_t> slot_offset(p.depth), slot_bytes(p.depth);
  uint64_t next = 0;
  int in_flight = 0;
  Status failure;
  while ((next < p.file_bytes && failure.ok()) || in_flight > 0) {
    while (failure.ok() && !free_slots.empty() && next < p.file_bytes) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (!sqe) break;
      const int slot = free_slots.back();
      free_slots.pop_back();
      const uint64_t len = std::min(p.block, p.file_bytes - next);
      char* buf = p.buffers + static_cast<size_t>(slot) * p.block;
      if (p.write && fixed)
        io_uring_prep_write_fixed(sqe, p.fd, buf, len, next, slot);
      else if (p.write)
        io_uring_prep_write(sqe, p.fd, buf, len, next);
      else if (fixed)
        io_uring_prep_read_fixed(sqe, p.fd, buf, len, next, slot);
      else
        io_uring_prep_read(sqe, p.fd, buf, len, next);
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
      slot_offset[slot] = next;
      slot_bytes[slot] = len;
      next += len;
      ++in_flight;
    }
    int ret;
    do {
      ret = io_uring_submit_and_wait(ring, in_flight > 0 ? 1 : 0);
    } while (ret == -EINTR);
    if (ret < 0)
      return io_error("io_uring_submit_and_wait on " + *p.path + ": " + errno_with_number(-ret));
    io_uring_cqe* cqe;
    unsigned head, reaped = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      if (failure.ok()) {
        if (cqe->res < 0)
          failure = request_error(*p.path, p.write, slot_offset[slot], slot_bytes[slot], -cqe->res);
        else if (static_cast<uint64_t>(cqe->res) != slot_bytes[slot])
          failure = short_transfer(*p.path, p.write, slot_offset[slot], slot_bytes[slot],
                                   static_cast<uint64_t>(cqe->res));
      }
      free_slots.push_back(slot);
      --in_flight;
      ++reaped;
    }
    io_uring_cq_advance(ring, reaped);
  }
  return failure;
}

// The same pass with `depth` threads, each owning one buffer slot.
Status threads_pass(const Pass& p) {
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  Status failure;
  auto worker = [&](int slot) {
    char* buf = p.buffers + static_cast<size_t>(slot) * p.block;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t offset = next.fetch_add(p.block);
      if (offset >= p.file_bytes) return;
      const uint64_t len = std::min(p.block, p.file_bytes - offset);
      ssize_t n;
      do {
        n = p.write ? ::pwrite(p.fd, buf, len, static_cast<off_t>(offset))
                    : ::pread(p.fd, buf, len, static_cast<off_t>(offset));
      } while (n < 0 && errno == EINTR);
      Status st;
      if (n < 0)
        st = request_error(*p.path, p.write, offset, len, errno);
      else if (static_cast<uint64_t>(n) != len)
        st = short_transfer(*p.path, p.write, offset, len, static_cast<uint64_t>(n));
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mutex);
        if (failure.ok()) failure = st;
        stop = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < p.depth; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();
  return failure;
}

}  // namespace

Result<DiskProbeResult> probe_disk(const DiskProbeOptions& options) {
  if (options.block_size == 0 || options.block_size % kAlignment != 0)
    return invalid_argument("disk probe block size " + std::to_string(options.block_size) +
                            " must be a positive multiple of 4096");
  if (options.queue_depth < 1 || options.queue_depth > 1024)
    return invalid_argument("disk probe queue depth " + std::to_string(options.queue_depth) +
                            " must be 1 to 1024");
  if (options.file_bytes == 0) return invalid_argument("disk probe size must be positive");
  const uint64_t file_bytes = (options.file_bytes + kAlignment - 1) / kAlignment * kAlignment;
  // No more slots than blocks: a small file is not probed with idle buffers.
  const uint64_t blocks = (file_bytes + options.block_size - 1) / options.block_size;
  const int depth = static_cast<int>(std::min<uint64_t>(options.queue_depth, blocks));

  DiskProbeResult result;
  result.bytes = file_bytes;
  io_uring ring;
  bool have_ring = false;
  if (options.backend != DiskProbeOptions::Backend::kThreads) {
    const int ret = io_uring_queue_init(static_cast<unsigned>(depth), &ring, 0);
    if (ret == 0) {
      have_ring = true;
    } else if (options.backend == DiskProbeOptions::Backend::kIoUring) {
      return unimplemented("io_uring_queue_init failed: " + errno_with_number(-ret) +
                           " (io_uring disabled by the kernel or a seccomp filter)");
    } else {
      result.backend_reason = "io_uring_queue_init: " + errno_with_number(-ret);
    }
  }
  struct RingCloser {
    io_uring* ring;
    bool active;
    ~RingCloser() {
      if (active) io_uring_queue_exit(ring);
    }
  } ring_closer{&ring, have_ring};
  result.backend = have_ring ? "io_uring" : "threads";

  const size_t buffer_bytes = static_cast<size_t>(depth) * options.block_size;
  std::unique_ptr<char, FreeDeleter> buffers(
      static_cast<char*>(std::aligned_alloc(kAlignment, buffer_bytes)));
  if (!buffers)
    return io_error("cannot allocate " + std::to_string(buffer_bytes) +
                    " bytes for the disk probe");
  // Non-zero, non-repeating bytes: nothing on the way can shortcut zeros.
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= buffer_bytes; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(buffers.get() + i, &x, 8);
  }

  bool fixed = false;
  if (have_ring) {
    std::vector<iovec> iovs(depth);
    for (int i = 0; i < depth; ++i)
      iovs[i] = {buffers.get() + static_cast<size_t>(i) * options.block_size, options.block_size};
    // Fixed buffers save a page pin per request; without them (RLIMIT_MEMLOCK) it still works.
    fixed = io_uring_register_buffers(&ring, iovs.data(), static_cast<unsigned>(depth)) == 0;
  }

  ProbeFile file;
  DSCORE_RETURN_IF_ERROR(file.create(options.folder));
  if (options.preallocate && ::fallocate(file.fd(), 0, 0, static_cast<off_t>(file_bytes)) != 0 &&
      errno != EOPNOTSUPP) {
    const int err = errno;
    return io_error("cannot allocate " + std::to_string(file_bytes) + " bytes for " + file.path() +
                    ": " + errno_with_number(err) +
                    (err == ENOSPC ? "; free space in the folder or probe a smaller size" : ""));
  }

  Pass pass{file.fd(), &file.path(), true, file_bytes, options.block_size, depth, buffers.get()};
  auto run = [&](bool write) {
    pass.write = write;
    return have_ring ? io_uring_pass(&ring, pass, fixed) : threads_pass(pass);
  };
  if (options.overwrite) {
    DSCORE_RETURN_IF_ERROR(run(true));
    if (::fdatasync(file.fd()) != 0)
      return io_error("fdatasync of " + file.path() + ": " + errno_with_number(errno));
  }
  auto start = std::chrono::steady_clock::now();
  DSCORE_RETURN_IF_ERROR(run(true));
  if (::fdatasync(file.fd()) != 0)
    return io_error("fdatasync of " + file.path() + ": " + errno_with_number(errno));
  result.write_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  DSCORE_RETURN_IF_ERROR(run(false));
  result.read_seconds = seconds_since(start);
  return result;
}

}  // namespace dscore::offload
