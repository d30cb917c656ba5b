// The host side of NVMe offload: one Swapper per rank drives an offload
// (swapper) plugin (sdk/include/dscore/offload.h) from its own I/O thread,
// so transfers keep flowing while the compute thread runs the optimizer.
//
//   read()/write() queue one transfer of any aligned size and return a
//   ticket at once; the I/O thread splits it into aio.block_size requests
//   and keeps up to aio.queue_depth of them in flight;
//   wait(ticket) blocks until that transfer completed (or failed).
//
// Every failure names the file, the byte offset and size of the request
// and the OS error, with the fix (a full disk: free space or move
// nvme_path). After a failure the Swapper refuses further transfers with
// the same message: nothing half-written is ever reported as done.
//
// Only the I/O thread calls the plugin, so plugins need no locking.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/config/json.h"
#include "core/plugin_host/comm_instance.h"

namespace dscore::offload {

// The config's "aio" section (docs/deepspeed-reference.md#aio), resolved.
struct AioSettings {
  int64_t block_size = 1048576;  // bytes per request
  int64_t queue_depth = 8;       // requests in flight
  int64_t intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
};
Result<AioSettings> aio_settings_from(const json::Value& aio);

class Swapper {
 public:
  using Ticket = uint64_t;  // 0 is never a ticket

  static Result<std::unique_ptr<Swapper>> create(
      std::unique_ptr<plugin_host::OffloadInstance> plugin, const AioSettings& settings);
  ~Swapper();  // waits for every queued transfer, closes the files
  Swapper(const Swapper&) = delete;
  Swapper& operator=(const Swapper&) = delete;

  // Addresses, offsets and sizes of transfers must be multiples of this.
  size_t alignment() const;
  const std::string& backend() const;  // "io_uring" or "threads", as the plugin says

  // Opens (DSCORE_OPEN_* flags) and returns a small file number.
  Result<int> open(const std::string& path, uint32_t flags);
  Status close(int file);  // waits for the file's transfers first
  Status sync(int file);   // waits for its transfers, then fsync

  // `buffer` must stay valid and untouched until wait() returned.
  Result<Ticket> read(int file, uint64_t offset, void* buffer, size_t bytes);
  Result<Ticket> write(int file, uint64_t offset, const void* buffer, size_t bytes);
  Status wait(Ticket ticket);
  Status wait_all();

  // Bytes moved since creation (for the plan's report and the benches).
  uint64_t bytes_read() const;
  uint64_t bytes_written() const;

 private:
  struct Impl;
  explicit Swapper(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscore::offload
