// The disk's own limit, measured without the Swapper: a fio-like sequential
// O_DIRECT write then read of one file in a folder, large blocks, deep
// queue, io_uring (liburing) directly, or a pool of pread/pwrite threads
// where io_uring is unavailable. Every disk figure of dscore (io-bench,
// bench/swap) is printed beside this one, measured in the same run.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace dscore::offload {

struct DiskProbeOptions {
  std::string folder;                // where the probe file is created (and removed)
  uint64_t file_bytes = 1ull << 30;  // rounded up to a multiple of 4096
  uint64_t block_size = 8ull << 20;  // bytes per request, a multiple of 4096
  int queue_depth = 32;              // requests in flight
  enum class Backend { kAuto, kIoUring, kThreads } backend = Backend::kAuto;
  bool preallocate = true;  // fallocate first, as fio does
  // Write the file once untimed, then time a second write over it: the
  // steady state of a swap file, which training overwrites in place every
  // step (a first write into new or fallocated blocks also pays for the
  // file system's allocation, ext4's unwritten-extent conversion).
  bool overwrite = true;
};

struct DiskProbeResult {
  uint64_t bytes = 0;          // written, then read
  double write_seconds = 0;    // first submit to the last completion + fdatasync (of the
                               // second write with `overwrite`)
  double read_seconds = 0;     // first submit to the last completion
  std::string backend;         // "io_uring" or "threads"
  std::string backend_reason;  // why "threads" under kAuto ("io_uring_queue_init: ...")
  double write_gbps() const { return write_seconds > 0 ? bytes / write_seconds / 1e9 : 0; }
  double read_gbps() const { return read_seconds > 0 ? bytes / read_seconds / 1e9 : 0; }
};

// Writes and reads a new file `<folder>/.dscore_disk_probe.XXXXXX`, removed
// before returning (also after an error). Errors name the folder or file,
// the offset and size of a failed request and the OS error; a folder whose
// file system refuses O_DIRECT (EINVAL at open) is an error that says so.
// Uses queue_depth x block_size bytes of aligned memory.
Result<DiskProbeResult> probe_disk(const DiskProbeOptions& options);

}  // namespace dscore::offload
