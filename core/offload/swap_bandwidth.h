// Sequential bandwidth through a Swapper: write a file, make it durable,
// read it back, timing each half. What `dscore io-bench` measures at each
// point of its sweep and what bench/swap reports beside the disk probe
// (disk_probe.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "core/offload/swapper.h"

namespace dscore::offload {

struct SwapBandwidth {
  uint64_t bytes = 0;        // written, then read
  double write_seconds = 0;  // first write() to the last completion + sync()
  double read_seconds = 0;   // first read() to the last completion
  double write_gbps() const { return write_seconds > 0 ? bytes / write_seconds / 1e9 : 0; }
  double read_gbps() const { return read_seconds > 0 ? bytes / read_seconds / 1e9 : 0; }
};

// The host buffers the transfers cycle through: enough for the Swapper to
// keep aio.queue_depth requests of aio.block_size in flight twice over, in
// transfers of at least 16 MiB (a tile of optimizer state is larger still).
struct SwapRing {
  uint64_t transfer_bytes = 0;  // bytes per read()/write() call
  uint64_t slots = 0;           // transfers in flight at most
  uint64_t bytes() const { return transfer_bytes * slots; }
};
SwapRing swap_ring_for(const config::AioConfig& settings, uint64_t file_bytes);

// Writes `bytes` (a multiple of swapper.alignment()) at the start of `path`
// (created or overwritten) through `swapper`, syncs it, reads it back, and
// closes it. With `overwrite`, a first write of the whole range (untimed)
// lays the file down, so the timed write overwrites allocated blocks as the
// disk probe's does (DiskProbeOptions::overwrite). Uses swap_ring_for()'s
// bytes of aligned host memory, registered with the swapper. Errors are the
// Swapper's (file, offset, size, errno).
Result<SwapBandwidth> measure_swap(Swapper& swapper, const std::string& path, uint64_t bytes,
                                   bool overwrite = false);

}  // namespace dscore::offload
