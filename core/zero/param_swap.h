// Stage 3 parameters on NVMe ("offload_param": {"device": "nvme"}): a
// rank's 16-bit shards (its local space, partition.h ShardedLayout) live in
// one swap file, `<folder>/params_<dtype>.swp`, instead of memory. The
// first max_in_cpu local elements stay in memory (DeepSpeed's max_in_cpu);
// the rest are read when a gather needs them, which ShardedZero does as
// part of the prefetch along the acquire trace (on the comm thread, or from
// a GPU on the swapper's I/O thread: swapped_gathers.h), so a layer's
// shards are fetched before the model asks for it. New values are written
// back tile by tile after each update (store()).
//
// Transfers are aligned: the file holds round_up(local, kTileGranularity)
// elements, and reads cover the aligned span around what is asked. A read
// goes through two staging buffers of up to kParamReadChunkBytes in turn
// (allocated at the first read, kept), so the disk reads the next chunk
// while the last one is copied out.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/memory.h"
#include "core/base/status.h"
#include "core/device/device.h"
#include "core/offload/swapper.h"

namespace dscore::zero {

class ParamSwap {
 public:
  // Creates the folder and the file (sized, zero) and the resident part:
  // pinned memory from `pinned_on` when given (a device whose memory the
  // host does not address copies straight from it, resident_at()), else
  // host memory.
  static Result<std::unique_ptr<ParamSwap>> create(offload::Swapper* swapper,
                                                   const std::string& folder, int64_t local_numel,
                                                   dscore_dtype dtype, int64_t max_in_cpu,
                                                   device::Device* pinned_on = nullptr);
  ~ParamSwap();
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  // Local elements [begin, begin + count) into dst (any thread).
  Status load(int64_t begin, int64_t count, void* dst);
  // Local elements [begin, begin + count), all past the resident part,
  // read straight into `room`: the aligned span around them, span_bytes()
  // at `room`, which is aligned to alignment() (any thread). Returns where
  // element `begin` landed. No copy: for pinned memory a device reads.
  Result<const void*> read_into(int64_t begin, int64_t count, void* room);
  // read_into in two halves: the read queued on the swapper's I/O thread
  // (`room` untouched by anyone else until finish_read), then waited for.
  struct Read {
    offload::Swapper::Ticket ticket = 0;
    const void* first = nullptr;  // where element `begin` lands
  };
  Result<Read> start_read_into(int64_t begin, int64_t count, void* room);
  Status finish_read(const Read& read) { return swapper_->wait(read.ticket); }
  bool read_done(const Read& read) const { return swapper_->done(read.ticket); }
  size_t span_bytes(int64_t begin, int64_t count) const;
  size_t alignment() const { return swapper_->alignment(); }
  // Local elements [begin, begin + count) from src. Writes to the file
  // need `begin` a multiple of kTileGranularity unless the range lies in
  // the resident part or ends the local space.
  Status store(int64_t begin, int64_t count, const void* src);
  // Every transfer done and durable in the page cache's view.
  Status flush();

  int64_t resident_elements() const { return resident_; }
  // Local element `begin` (< resident_elements()) where it is kept in memory.
  const void* resident_at(int64_t begin) const;
  int64_t file_elements() const { return file_elements_; }
  std::string describe() const;

 private:
  ParamSwap() = default;
  Status read_span(int64_t begin, int64_t count, void* dst);
  // One chunk's read: file elements [begin, end) into read_staging_[buffer].
  struct ChunkRead {
    offload::Swapper::Ticket ticket = 0;
    int64_t begin = 0, end = 0;
    int buffer = 0;
  };
  Result<ChunkRead> start_chunk(int64_t begin, int64_t end, int buffer);

  offload::Swapper* swapper_ = nullptr;
  std::string folder_, path_;
  int file_ = -1;
  dscore_dtype dtype_ = DSCORE_DTYPE_BF16;
  size_t element_size_ = 2;
  int64_t local_ = 0, resident_ = 0, file_elements_ = 0;
  // Elements [0, resident_): host memory, or pinned memory from a device.
  CountedBuffer resident_memory_;
  device::Buffer resident_pinned_;
  char* resident_data() const;
  std::mutex read_mutex_;  // loads may come from any thread; one at a time
  CountedBuffer read_staging_[2];
  int64_t read_chunk_elements_ = 0;
};

}  // namespace dscore::zero
