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
// With aio.overlap_events false the I/O thread submits a batch of up to
// queue_depth requests only once the previous batch completed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/config/json.h"
#include "core/config/training_config.h"
#include "core/plugin_host/comm_instance.h"
#include "core/plugin_host/instances.h"
#include "core/plugin_host/registry.h"

namespace dscore::offload {

class Swapper {
 public:
  using Ticket = uint64_t;  // 0 is never a ticket

  // INVALID_ARGUMENT when block_size is not a multiple of the plugin's
  // alignment.
  static Result<std::unique_ptr<Swapper>> create(
      std::unique_ptr<plugin_host::OffloadInstance> plugin, const config::AioConfig& settings);
  ~Swapper();  // waits for every queued transfer, closes the files
  Swapper(const Swapper&) = delete;
  Swapper& operator=(const Swapper&) = delete;

  // Addresses, offsets and sizes of transfers must be multiples of this.
  size_t alignment() const;
  const std::string& backend() const;  // "io_uring" or "threads", as the plugin says
  const config::AioConfig& settings() const;

  // Opens (DSCORE_OPEN_* flags) and returns a small file number.
  Result<int> open(const std::string& path, uint32_t flags);
  Status close(int file);  // waits for the file's transfers first
  // Waits for the file's transfers, then fsync; after a failure, that
  // failure instead.
  Status sync(int file);
  const std::string& path(int file) const;  // as given to open()

  // Replace the set of buffers the plugin may pre-register (io_uring fixed
  // buffers; an empty list clears it). Waits for every transfer first.
  // Each buffer must stay allocated until the set is replaced or the
  // Swapper is destroyed. OK when the plugin does not register.
  Status register_buffers(const std::vector<std::pair<void*, size_t>>& buffers);

  // `buffer` must stay valid and untouched until wait() returned.
  Result<Ticket> read(int file, uint64_t offset, void* buffer, size_t bytes);
  Result<Ticket> write(int file, uint64_t offset, const void* buffer, size_t bytes);
  // A ticket is waited for once; INVALID_ARGUMENT for one that is not
  // pending. wait_all() waits for every transfer and forgets every ticket;
  // it returns the first failure (or the sticky one).
  Status wait(Ticket ticket);
  Status wait_all();
  // Without blocking: whether wait(ticket) would return at once (the
  // transfer completed or failed, or the ticket is not pending).
  bool done(Ticket ticket) const;

  // The sticky failure (OK while none happened).
  Status failure() const;

  // Bytes moved since creation (for the plan's report and the benches).
  uint64_t bytes_read() const;
  uint64_t bytes_written() const;

 private:
  struct Impl;
  explicit Swapper(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The swapper plugin `plugin` from the registry, created with `settings` as
// its params (plus `extra_params`, for plugins that take more), in
// `context` (rank, the engine's host context), driven by a new Swapper.
Result<std::unique_ptr<Swapper>> make_swapper(const plugin_host::PluginRegistry& registry,
                                              const config::AioConfig& settings,
                                              const plugin_host::InstanceContext& context,
                                              const std::string& plugin = "nvme",
                                              const json::Value& extra_params = json::Value());

}  // namespace dscore::offload
