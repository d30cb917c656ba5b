#include "core/zero/param_swap.h"

#include <dscore/offload.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/base/strings.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/plan.h"

namespace dscore::zero {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The granules around local elements [begin, begin + count): what a file
// transfer of them covers.
struct Span {
  int64_t lo, hi;
};
Span aligned_span(int64_t begin, int64_t count) {
  return {begin / kTileGranularity * kTileGranularity, round_up(begin + count, kTileGranularity)};
}

// Staging for unaligned pieces: aligned memory of `bytes`.
struct Staging {
  CountedBuffer memory;
  static Result<Staging> make(size_t bytes, size_t alignment) {
    void* p = counted_alloc(std::max(bytes, alignment), alignment, DSCORE_MEMORY_HOST,
                            MemoryUse::kBuffers, "nvme parameter staging");
    if (p == nullptr)
      return Status(DSCORE_RESOURCE_EXHAUSTED, "cannot allocate " + std::to_string(bytes) +
                                                   " bytes of staging for parameters on NVMe");
    return Staging{CountedBuffer(p, CountedFree{DSCORE_MEMORY_HOST})};
  }
};

}  // namespace

Result<std::unique_ptr<ParamSwap>> ParamSwap::create(offload::Swapper* swapper,
                                                     const std::string& folder, int64_t local_numel,
                                                     dscore_dtype dtype, int64_t max_in_cpu,
                                                     device::Device* pinned_on) {
  std::unique_ptr<ParamSwap> s(new ParamSwap());
  s->swapper_ = swapper;
  s->folder_ = folder;
  s->dtype_ = dtype;
  s->element_size_ = sdk::dtype_size(dtype);
  s->local_ = local_numel;
  // The resident part ends on a granule, so file transfers stay aligned.
  s->resident_ = param_resident_elements(local_numel, max_in_cpu);
  s->file_elements_ = round_up(std::max<int64_t>(local_numel, 1), kTileGranularity);
  constexpr const char* kResidentName = "parameters (resident of offload_param)";
  if (s->resident_ > 0 && pinned_on != nullptr) {
    DSCORE_ASSIGN_OR_RETURN(
        s->resident_pinned_,
        pinned_on->allocate(static_cast<size_t>(s->resident_) * s->element_size_,
                            device::Placement::kPinned, MemoryUse::kParameters, kResidentName));
  } else if (s->resident_ > 0) {
    DSCORE_ASSIGN_OR_RETURN(
        s->resident_memory_,
        tensor::allocate_elements(s->resident_, dtype, MemoryUse::kParameters, kResidentName));
  }
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec)
    return failed_precondition("cannot create the NVMe parameter folder " + folder + ": " +
                               ec.message() + "; check zero_optimization.offload_param.nvme_path");
  s->path_ = folder + "/params_" + sdk::dtype_name(dtype) + ".swp";
  DSCORE_ASSIGN_OR_RETURN(
      s->file_, swapper->open(s->path_, DSCORE_OPEN_READ | DSCORE_OPEN_WRITE | DSCORE_OPEN_CREATE |
                                            DSCORE_OPEN_TRUNCATE));
  return s;
}

ParamSwap::~ParamSwap() {
  if (file_ >= 0) (void)swapper_->close(file_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  std::filesystem::remove(folder_, ec);  // only when empty
  std::filesystem::remove(std::filesystem::path(folder_).parent_path(), ec);
}

char* ParamSwap::resident_data() const {
  return static_cast<char*>(resident_pinned_ ? resident_pinned_.data() : resident_memory_.get());
}

const void* ParamSwap::resident_at(int64_t begin) const {
  return resident_data() + begin * static_cast<int64_t>(element_size_);
}

std::string ParamSwap::describe() const {
  const auto es = static_cast<uint64_t>(element_size_);
  return format_bytes(static_cast<uint64_t>(local_ - resident_) * es) + " on NVMe in " + path_ +
         ", " + format_bytes(static_cast<uint64_t>(resident_) * es) + " resident (max_in_cpu)";
}

Result<ParamSwap::ChunkRead> ParamSwap::start_chunk(int64_t begin, int64_t end, int buffer) {
  const auto es = static_cast<uint64_t>(element_size_);
  DSCORE_ASSIGN_OR_RETURN(
      offload::Swapper::Ticket ticket,
      swapper_->read(file_, static_cast<uint64_t>(begin) * es, read_staging_[buffer].get(),
                     static_cast<size_t>(end - begin) * es));
  return ChunkRead{ticket, begin, end, buffer};
}

Status ParamSwap::read_span(int64_t begin, int64_t count, void* dst) {
  // [begin, begin + count) lies at or past resident_: read the aligned span
  // chunk by chunk, the next chunk in flight while this one is copied out.
  const auto [lo, hi] = aligned_span(begin, count);
  const auto es = static_cast<int64_t>(element_size_);
  std::lock_guard<std::mutex> lock(read_mutex_);
  if (!read_staging_[0]) {
    const int64_t bytes = param_read_staging_bytes(local_, resident_, dtype_) / 2;
    read_chunk_elements_ = bytes / es;
    for (CountedBuffer& b : read_staging_) {
      DSCORE_ASSIGN_OR_RETURN(Staging staging,
                              Staging::make(static_cast<size_t>(bytes), swapper_->alignment()));
      b = std::move(staging.memory);
    }
  }
  const int64_t chunk = read_chunk_elements_;
  DSCORE_ASSIGN_OR_RETURN(ChunkRead current, start_chunk(lo, std::min(lo + chunk, hi), 0));
  for (;;) {
    std::optional<ChunkRead> next;
    Status status = Status::Ok();
    if (current.end < hi) {
      Result<ChunkRead> started =
          start_chunk(current.end, std::min(current.end + chunk, hi), 1 - current.buffer);
      if (started.ok())
        next = *started;
      else
        status = started.status();
    }
    Status waited = swapper_->wait(current.ticket);
    if (status.ok()) status = waited;
    if (!status.ok()) {
      if (next) (void)swapper_->wait(next->ticket);  // its buffer is ours again
      return status;
    }
    const int64_t a = std::max(current.begin, begin), b = std::min(current.end, begin + count);
    std::memcpy(
        static_cast<char*>(dst) + (a - begin) * es,
        static_cast<const char*>(read_staging_[current.buffer].get()) + (a - current.begin) * es,
        static_cast<size_t>(b - a) * es);
    if (!next) return Status::Ok();
    current = *next;
  }
}

size_t ParamSwap::span_bytes(int64_t begin, int64_t count) const {
  const Span span = aligned_span(begin, count);
  return static_cast<size_t>(span.hi - span.lo) * element_size_;
}

Result<const void*> ParamSwap::read_into(int64_t begin, int64_t count, void* room) {
  DSCORE_ASSIGN_OR_RETURN(Read read, start_read_into(begin, count, room));
  DSCORE_RETURN_IF_ERROR(finish_read(read));
  return read.first;
}

Result<ParamSwap::Read> ParamSwap::start_read_into(int64_t begin, int64_t count, void* room) {
  if (begin < resident_ || count <= 0 || begin + count > local_ ||
      reinterpret_cast<uintptr_t>(room) % swapper_->alignment() != 0)
    return internal_error("ParamSwap::read_into: elements [" + std::to_string(begin) + ", " +
                          std::to_string(begin + count) + ") are not all in the file (" +
                          std::to_string(resident_) + " resident of " + std::to_string(local_) +
                          "), or the room is not aligned to " +
                          std::to_string(swapper_->alignment()) + " bytes");
  const int64_t lo = aligned_span(begin, count).lo;
  const auto es = static_cast<uint64_t>(element_size_);
  DSCORE_ASSIGN_OR_RETURN(
      offload::Swapper::Ticket t,
      swapper_->read(file_, static_cast<uint64_t>(lo) * es, room, span_bytes(begin, count)));
  return Read{t, static_cast<const char*>(room) + static_cast<uint64_t>(begin - lo) * es};
}

Status ParamSwap::load(int64_t begin, int64_t count, void* dst) {
  char* out = static_cast<char*>(dst);
  const size_t es = element_size_;
  if (begin < resident_) {
    const int64_t n = std::min(count, resident_ - begin);
    std::memcpy(out, resident_data() + begin * es, static_cast<size_t>(n) * es);
    begin += n;
    count -= n;
    out += n * es;
  }
  if (count <= 0) return Status::Ok();
  return read_span(begin, count, out);
}

Status ParamSwap::store(int64_t begin, int64_t count, const void* src) {
  const char* in = static_cast<const char*>(src);
  const size_t es = element_size_;
  if (begin < resident_) {
    const int64_t n = std::min(count, resident_ - begin);
    std::memcpy(resident_data() + begin * es, in, static_cast<size_t>(n) * es);
    begin += n;
    count -= n;
    in += n * es;
  }
  if (count <= 0) return Status::Ok();
  // Read-modify-write of the aligned span: a piece that starts or ends
  // inside a granule keeps its neighbours' values.
  const auto [lo, hi] = aligned_span(begin, count);
  DSCORE_ASSIGN_OR_RETURN(Staging staging,
                          Staging::make(static_cast<size_t>(hi - lo) * es, swapper_->alignment()));
  char* span = static_cast<char*>(staging.memory.get());
  // The padding after the last element needs no reading; the file has
  // every granule once initialise wrote it front to back.
  const bool partial_head = lo != begin;
  const bool partial_tail = hi != begin + count && begin + count < local_;
  if (partial_head || partial_tail) {
    DSCORE_ASSIGN_OR_RETURN(offload::Swapper::Ticket r,
                            swapper_->read(file_, static_cast<uint64_t>(lo) * es, span,
                                           static_cast<size_t>(hi - lo) * es));
    DSCORE_RETURN_IF_ERROR(swapper_->wait(r));
  } else if (hi != begin + count) {
    std::memset(span + (begin + count - lo) * es, 0, static_cast<size_t>(hi - begin - count) * es);
  }
  std::memcpy(span + (begin - lo) * es, in, static_cast<size_t>(count) * es);
  DSCORE_ASSIGN_OR_RETURN(offload::Swapper::Ticket w,
                          swapper_->write(file_, static_cast<uint64_t>(lo) * es, span,
                                          static_cast<size_t>(hi - lo) * es));
  return swapper_->wait(w);
}

Status ParamSwap::flush() { return swapper_->wait_all(); }

}  // namespace dscore::zero
