#include "core/owned_state/nvme_state.h"

#include <dscore/offload.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/tensor/dtype_ops.h"
#include "core/zero/zero_memory.h"

namespace dscore {
namespace {

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string human_bytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

Result<std::unique_ptr<NvmeState>> NvmeState::create(
    offload::Swapper* swapper, const NvmeStateOptions& options,
    const std::vector<zero::StateSlot>& slots, const std::vector<double>& initial_values,
    int64_t owned, float* fp32_master, const Model& model,
    const std::vector<zero::OwnedSegment>& segments) {
  std::unique_ptr<NvmeState> s(new NvmeState());
  s->swapper_ = swapper;
  s->options_ = options;
  s->slots_ = slots;
  s->owned_ = owned;
  s->tile_ = zero::nvme_tile_elements(options.sub_group_size, owned);
  // Staged, an fp32 model's master has a file: its parameters are on the device.
  s->fp32_master_ = options.staging ? nullptr : fp32_master;
  const size_t alignment = s->swapper_->alignment();
  if (static_cast<size_t>(zero::kTileGranularity) % alignment != 0)
    return failed_precondition("the offload plugin needs " + std::to_string(alignment) +
                               "-byte alignment; dscore's NVMe tiles are aligned to " +
                               std::to_string(zero::kTileGranularity) + " bytes");
  std::error_code ec;
  std::filesystem::create_directories(options.folder, ec);
  if (ec)
    return failed_precondition("cannot create the NVMe offload folder " + options.folder + ": " +
                               ec.message() +
                               "; check zero_optimization.offload_optimizer.nvme_path");
  if (s->fp32_master_ == nullptr)
    s->files_.push_back({options.folder + "/master_fp32.swp", -1, 4, kMasterState});
  for (size_t k = 0; k < slots.size(); ++k)
    s->files_.push_back(
        {options.folder + "/" + slots[k].name + ".swp", -1,
         static_cast<size_t>(slots[k].elements_per_param) * sdk::dtype_size(slots[k].dtype),
         static_cast<int>(k)});
  for (File& f : s->files_) {
    DSCORE_ASSIGN_OR_RETURN(
        f.number, s->swapper_->open(f.path, DSCORE_OPEN_READ | DSCORE_OPEN_WRITE |
                                                DSCORE_OPEN_CREATE | DSCORE_OPEN_TRUNCATE));
  }
  const size_t buffer_count =
      1 + (options.pipeline_read ? 1 : 0) + (options.pipeline_write ? 1 : 0);
  size_t tile_bytes = 0;
  for (const File& f : s->files_) tile_bytes += static_cast<size_t>(s->tile_) * f.value_bytes;
  for (size_t b = 0; b < buffer_count; ++b) {
    Buffer buffer;
    void* memory =
        counted_alloc(std::max<size_t>(tile_bytes, alignment), alignment, DSCORE_MEMORY_HOST,
                      MemoryUse::kOptimizerState, "nvme tile buffer");
    if (memory == nullptr)
      return Status(DSCORE_RESOURCE_EXHAUSTED, "cannot allocate an NVMe tile buffer of " +
                                                   human_bytes(static_cast<int64_t>(tile_bytes)) +
                                                   ": lower zero_optimization.sub_group_size");
    buffer.memory = CountedBuffer(memory, CountedFree{DSCORE_MEMORY_HOST});
    buffer.bytes = std::max<size_t>(tile_bytes, alignment);
    char* at = static_cast<char*>(memory);
    for (const File& f : s->files_) {
      buffer.parts.push_back(at);
      at += static_cast<size_t>(s->tile_) * f.value_bytes;
    }
    s->buffers_.push_back(std::move(buffer));
  }
  if (options.staging) DSCORE_RETURN_IF_ERROR(s->create_staging());
  // The initial state, tile by tile: master values from init_param (a
  // function of parameter and element, so tiling does not change them).
  DSCORE_RETURN_IF_ERROR(s->walk(false, true, [&](const StateTile& tile) -> Status {
    if (s->fp32_master_ == nullptr) {
      std::memset(tile.master, 0, static_cast<size_t>(s->tile_) * sizeof(float));
      if (fp32_master != nullptr)  // staged fp32: the strategy's parameters, from the device
        DSCORE_RETURN_IF_ERROR(zero::download(
            options.staging->device, options.staging->compute, tile.master,
            fp32_master + tile.begin, static_cast<size_t>(tile.end - tile.begin) * sizeof(float)));
      for (const zero::OwnedSegment& seg : segments) {
        const int64_t a = std::max(seg.offset, tile.begin);
        const int64_t b = std::min(seg.offset + seg.numel, tile.end);
        if (a < b)
          DSCORE_RETURN_IF_ERROR(model.init_param(seg.param, seg.element + (a - seg.offset), b - a,
                                                  tile.master + (a - tile.begin)));
      }
    }
    for (size_t k = 0; k < slots.size(); ++k)
      fill_value(tile.slots[k], slots[k].dtype, s->tile_ * slots[k].elements_per_param,
                 initial_values[k]);
    return Status::Ok();
  }));
  return s;
}

Status NvmeState::create_staging() {
  const DeviceSide& side = *options_.staging;
  DSCORE_ASSIGN_OR_RETURN(copy_, side.device->create_stream("nvme offload copies"));
  const device::Placement placement =
      side.pinned ? device::Placement::kPinned : device::Placement::kHost;
  for (Buffer& buffer : buffers_) {
    DSCORE_ASSIGN_OR_RETURN(
        buffer.grads,
        side.device->allocate(static_cast<size_t>(tile_) * sdk::dtype_size(side.grad_dtype),
                              placement, MemoryUse::kOptimizerState, "nvme gradient tile", false));
  }
  // The tile buffers are refilled while their parameters may still be on
  // their way out: fp32 values are staged too.
  DSCORE_ASSIGN_OR_RETURN(write_back_,
                          ParamWriteBack::create(side, copy_.get(), tile_, /*stage_fp32=*/true));
  return Status::Ok();
}

NvmeState::~NvmeState() {
  // No copy may still reach the buffers freed after this.
  if (copy_) (void)copy_->synchronize();
  if (!swapper_) return;
  (void)swapper_->wait_all();
  for (const File& f : files_)
    if (f.number >= 0) (void)swapper_->close(f.number);
  // Scratch files: the state that matters is in checkpoints.
  std::error_code ec;
  for (const File& f : files_) std::filesystem::remove(f.path, ec);
  std::filesystem::remove(options_.folder, ec);  // only when empty
  std::filesystem::remove(std::filesystem::path(options_.folder).parent_path(), ec);
}

std::string NvmeState::describe() const {
  int64_t bytes = 0;
  for (const File& f : files_) bytes += round_up(owned_, zero::kTileGranularity) * f.value_bytes;
  return "on NVMe in " + options_.folder + " (" + human_bytes(bytes) + ", " +
         std::to_string(tile_count()) + " tile(s) of " + std::to_string(tile_) + " elements, " +
         std::to_string(buffers_.size()) + " tile buffer(s), " + swapper_->backend() +
         (options_.staging ? "; updated on the host, gradients and parameters staged through "
                             "host buffers from the device"
                           : "") +
         ")";
}

int64_t NvmeState::transfer_bytes() const {
  int64_t bytes = 0;
  for (const Buffer& b : buffers_) bytes += static_cast<int64_t>(b.bytes + b.grads.bytes());
  return bytes + write_back_.bytes();
}

StateTile NvmeState::view(int64_t tile, Buffer& buffer) const {
  StateTile t;
  t.begin = tile * tile_;
  t.end = std::min(t.begin + tile_, owned_);
  t.slots.assign(slots_.size(), nullptr);
  for (size_t f = 0; f < files_.size(); ++f) {
    if (files_[f].state == kMasterState)
      t.master = reinterpret_cast<float*>(buffer.parts[f]);
    else
      t.slots[static_cast<size_t>(files_[f].state)] = buffer.parts[f];
  }
  if (fp32_master_ != nullptr) t.master = fp32_master_ + t.begin;
  if (stage_grads_) t.grads = buffer.grads.data();
  return t;
}

Status NvmeState::transfer(int64_t tile, Buffer& buffer, bool write) {
  const int64_t begin = tile * tile_;
  const int64_t elements =
      round_up(std::min(begin + tile_, owned_) - begin, zero::kTileGranularity);
  for (size_t f = 0; f < files_.size(); ++f) {
    const uint64_t offset = static_cast<uint64_t>(begin) * files_[f].value_bytes;
    const size_t bytes = static_cast<size_t>(elements) * files_[f].value_bytes;
    DSCORE_ASSIGN_OR_RETURN(offload::Swapper::Ticket ticket,
                            write
                                ? swapper_->write(files_[f].number, offset, buffer.parts[f], bytes)
                                : swapper_->read(files_[f].number, offset, buffer.parts[f], bytes));
    buffer.pending.push_back(ticket);
  }
  if (stage_grads_ && !write) {
    const DeviceSide& side = *options_.staging;
    const size_t size = sdk::dtype_size(side.grad_dtype);
    const int64_t end = std::min(begin + tile_, owned_);
    side.device->copy(buffer.grads.data(),
                      static_cast<const char*>(side.grads) + static_cast<size_t>(begin) * size,
                      static_cast<size_t>(end - begin) * size, *copy_);
    buffer.grads_in = copy_->record();
  }
  return Status::Ok();
}

Status NvmeState::settle(Buffer& buffer) {
  Status first = Status::Ok();
  for (offload::Swapper::Ticket t : buffer.pending) {
    Status s = swapper_->wait(t);
    if (first.ok() && !s.ok()) first = s;
  }
  buffer.pending.clear();
  Status grads = device::wait_for(buffer.grads_in);
  buffer.grads_in = nullptr;
  return first.ok() ? grads : first;
}

Status NvmeState::settle_all() {
  Status first = Status::Ok();
  for (Buffer& b : buffers_) {
    Status s = settle(b);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status NvmeState::for_each_tile(TileAccess access,
                                const std::function<Status(const StateTile&)>& visit) {
  if (options_.staging && access != TileAccess::kRead) return staged_update(access, visit);
  return walk(true, access != TileAccess::kRead, visit);
}

Status NvmeState::staged_update(TileAccess access,
                                const std::function<Status(const StateTile&)>& visit) {
  // The reduced gradients are final, and the model is done reading its
  // parameters, once the compute stream is.
  copy_->wait(options_.staging->compute->record());
  stage_grads_ = true;
  Status status = walk(true, true, [&](const StateTile& tile) -> Status {
    StateTile staged = tile;
    return write_back_.visit_then_send(access, &staged, visit);
  });
  stage_grads_ = false;
  // Every copy done, also after a failure: the model reads the new
  // parameters, and the staging is the host's again.
  Status copies = copy_->synchronize();
  write_back_.release();
  return status.ok() ? copies : status;
}

Status NvmeState::walk(bool read_tiles, bool write_tiles,
                       const std::function<Status(const StateTile&)>& visit) {
  const int64_t tiles = tile_count();
  const size_t count = buffers_.size();
  auto buffer_of = [&](int64_t tile) -> Buffer& {
    return buffers_[static_cast<size_t>(tile) % count];
  };
  auto fail = [&](Status status) {
    (void)settle_all();
    return status;
  };
  if (read_tiles && tiles > 0) DSCORE_RETURN_IF_ERROR(transfer(0, buffer_of(0), false));
  for (int64_t t = 0; t < tiles; ++t) {
    Buffer& current = buffer_of(t);
    if (Status s = settle(current); !s.ok()) return fail(s);  // tile t is in (or free)
    const bool ahead = read_tiles && t + 1 < tiles;
    if (ahead && options_.pipeline_read) {
      Buffer& next = buffer_of(t + 1);  // held tile t+1-count: its write must be done
      if (Status s = settle(next); !s.ok()) return fail(s);
      if (Status s = transfer(t + 1, next, false); !s.ok()) return fail(s);
    }
    if (Status s = visit(view(t, current)); !s.ok()) return fail(s);
    if (write_tiles) {
      if (Status s = transfer(t, current, true); !s.ok()) return fail(s);
      if (!options_.pipeline_write)
        if (Status s = settle(current); !s.ok()) return fail(s);
    }
    if (ahead && !options_.pipeline_read) {
      Buffer& next = buffer_of(t + 1);
      if (Status s = settle(next); !s.ok()) return fail(s);
      if (Status s = transfer(t + 1, next, false); !s.ok()) return fail(s);
    }
  }
  return settle_all();
}

Status NvmeState::read(int state, int64_t first, int64_t count, void* dst) {
  if (state == kMasterState && fp32_master_ != nullptr) {
    std::memcpy(dst, fp32_master_ + first, static_cast<size_t>(count) * sizeof(float));
    return Status::Ok();
  }
  size_t f = 0;
  while (f < files_.size() && files_[f].state != state) ++f;
  if (f == files_.size()) return invalid_argument("no optimizer state " + std::to_string(state));
  // Values, not elements: a slot may hold several per element. Through
  // buffer 0's part for this file, in aligned pieces.
  const size_t value_size = state == kMasterState
                                ? sizeof(float)
                                : sdk::dtype_size(slots_[static_cast<size_t>(state)].dtype);
  DSCORE_RETURN_IF_ERROR(settle_all());
  Buffer& bounce = buffers_[0];
  const uint64_t capacity = static_cast<uint64_t>(tile_) * files_[f].value_bytes;
  const uint64_t align = zero::kTileGranularity;
  uint64_t begin = static_cast<uint64_t>(first) * value_size;
  const uint64_t end = begin + static_cast<uint64_t>(count) * value_size;
  char* out = static_cast<char*>(dst);
  while (begin < end) {
    const uint64_t aligned = begin / align * align;
    const uint64_t span = std::min<uint64_t>(capacity, (end - aligned + align - 1) / align * align);
    DSCORE_ASSIGN_OR_RETURN(offload::Swapper::Ticket ticket,
                            swapper_->read(files_[f].number, aligned, bounce.parts[f], span));
    DSCORE_RETURN_IF_ERROR(swapper_->wait(ticket));
    const uint64_t n = std::min<uint64_t>(end, aligned + span) - begin;
    std::memcpy(out, bounce.parts[f] + (begin - aligned), n);
    out += n;
    begin += n;
  }
  return Status::Ok();
}

}  // namespace dscore
