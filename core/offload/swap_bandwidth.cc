// measure_swap (swap_bandwidth.h): a ring of host buffers, each transfer
// waiting only for the one that last used its slot, so the Swapper always
// has queued work and the figure is the Swapper's, not the caller's.
#include "core/offload/swap_bandwidth.h"

#include <dscore/offload.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/offload/offload_util.h"

namespace dscore::offload {
namespace {

constexpr uint64_t kMinTransfer = 16ull << 20;

// One sequential pass over [0, bytes) of `file`, `ring.slots` transfers in flight.
Status pass(Swapper& swapper, int file, bool write, uint64_t bytes, const SwapRing& ring,
            char* buffers) {
  std::vector<Swapper::Ticket> pending(ring.slots, 0);
  uint64_t index = 0;
  for (uint64_t offset = 0; offset < bytes; offset += ring.transfer_bytes, ++index) {
    const uint64_t slot = index % ring.slots;
    if (pending[slot] != 0) DSCORE_RETURN_IF_ERROR(swapper.wait(pending[slot]));
    char* buffer = buffers + slot * ring.transfer_bytes;
    const size_t len = std::min(ring.transfer_bytes, bytes - offset);
    Result<Swapper::Ticket> ticket =
        write ? swapper.write(file, offset, buffer, len) : swapper.read(file, offset, buffer, len);
    if (!ticket.ok()) return ticket.status();
    pending[slot] = *ticket;
  }
  return swapper.wait_all();
}

}  // namespace

SwapRing swap_ring_for(const config::AioConfig& settings, uint64_t file_bytes) {
  const uint64_t block = static_cast<uint64_t>(std::max<int64_t>(settings.block_size, 1));
  const uint64_t in_flight =
      block * static_cast<uint64_t>(std::max<int64_t>(settings.queue_depth, 1));
  SwapRing ring;
  ring.transfer_bytes = std::max(block, kMinTransfer / block * block);
  ring.slots =
      std::max<uint64_t>(2, (2 * in_flight + ring.transfer_bytes - 1) / ring.transfer_bytes);
  // A small file needs no more memory than itself.
  const uint64_t transfers = (file_bytes + ring.transfer_bytes - 1) / ring.transfer_bytes;
  ring.slots = std::max<uint64_t>(1, std::min(ring.slots, transfers));
  return ring;
}

Result<SwapBandwidth> measure_swap(Swapper& swapper, const std::string& path, uint64_t bytes,
                                   bool overwrite) {
  const uint64_t alignment = swapper.alignment();
  if (bytes == 0 || bytes % alignment != 0)
    return invalid_argument("swap measurement size " + std::to_string(bytes) +
                            " must be a positive multiple of the swapper's alignment " +
                            std::to_string(alignment));
  const SwapRing ring = swap_ring_for(swapper.settings(), bytes);
  std::unique_ptr<char, FreeDeleter> buffers(
      static_cast<char*>(std::aligned_alloc(std::max<uint64_t>(alignment, 4096), ring.bytes())));
  if (!buffers)
    return io_error("cannot allocate " + std::to_string(ring.bytes()) + " bytes of swap buffers");
  // Non-zero, non-repeating bytes: nothing on the way can shortcut zeros.
  uint64_t x = 0x243F6A8885A308D3ull;
  for (uint64_t i = 0; i + 8 <= ring.bytes(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(buffers.get() + i, &x, 8);
  }
  DSCORE_RETURN_IF_ERROR(swapper.register_buffers({{buffers.get(), ring.bytes()}}));
  Result<int> file = swapper.open(path, DSCORE_OPEN_READ | DSCORE_OPEN_WRITE | DSCORE_OPEN_CREATE);
  if (!file.ok()) return file.status();
  SwapBandwidth out;
  out.bytes = bytes;
  Status st = [&]() -> Status {
    if (overwrite) {
      DSCORE_RETURN_IF_ERROR(pass(swapper, *file, true, bytes, ring, buffers.get()));
      DSCORE_RETURN_IF_ERROR(swapper.sync(*file));
    }
    auto start = std::chrono::steady_clock::now();
    DSCORE_RETURN_IF_ERROR(pass(swapper, *file, true, bytes, ring, buffers.get()));
    DSCORE_RETURN_IF_ERROR(swapper.sync(*file));
    out.write_seconds = seconds_since(start);
    start = std::chrono::steady_clock::now();
    DSCORE_RETURN_IF_ERROR(pass(swapper, *file, false, bytes, ring, buffers.get()));
    out.read_seconds = seconds_since(start);
    return Status::Ok();
  }();
  // The buffers are freed on return: the swapper must forget them first.
  Status closed = swapper.close(*file);
  Status unregistered = swapper.register_buffers({});
  DSCORE_RETURN_IF_ERROR(st);
  DSCORE_RETURN_IF_ERROR(closed);
  DSCORE_RETURN_IF_ERROR(unregistered);
  return out;
}

}  // namespace dscore::offload
