#include "core/owned_state/host_offload_state.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/owned_state/owned_state_util.h"
#include "core/tensor/dtype_ops.h"
#include "core/zero/zero_memory.h"

namespace dscore {

Result<std::unique_ptr<HostOffloadState>> HostOffloadState::create(
    const HostOffloadOptions& options, const std::vector<zero::StateSlot>& slots,
    const std::vector<double>& initial_values, int64_t owned, const float* fp32_params,
    const Model& model, const std::vector<zero::OwnedSegment>& segments) {
  const DeviceSide& side = options.side;
  if (side.device == nullptr || side.compute == nullptr || options.tile_elements <= 0)
    return internal_error(
        "HostOffloadState needs the engine's device, its compute stream and a "
        "tile size");
  std::unique_ptr<HostOffloadState> s(new HostOffloadState());
  s->options_ = options;
  s->slots_ = slots;
  s->first_ = options.first;
  s->owned_ = owned;
  s->tile_ = options.tile_elements;
  device::Device& device = *side.device;
  const device::Placement placement =
      side.pinned ? device::Placement::kPinned : device::Placement::kHost;
  DSCORE_ASSIGN_OR_RETURN(s->copy_, device.create_stream("offload copies"));
  const int64_t elements = std::max<int64_t>(owned, 1);
  DSCORE_ASSIGN_OR_RETURN(s->master_,
                          device.allocate(size_of(elements, DSCORE_DTYPE_F32), placement,
                                          MemoryUse::kMaster, "offload master fp32"));
  float* master = static_cast<float*>(s->master_.data());
  if (fp32_params != nullptr) {
    DSCORE_RETURN_IF_ERROR(zero::download(side.device, side.compute, master,
                                          fp32_params + options.first,
                                          size_of(owned, DSCORE_DTYPE_F32)));
  } else {
    // init_param is a function of parameter and element: the values the
    // strategy's 16-bit parameters were made from.
    for (const zero::OwnedSegment& seg : segments) {
      const int64_t a = std::max(seg.offset, options.first);
      const int64_t b = std::min(seg.offset + seg.numel, options.first + owned);
      if (a < b)
        DSCORE_RETURN_IF_ERROR(model.init_param(seg.param, seg.element + (a - seg.offset), b - a,
                                                master + (a - options.first)));
    }
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t values = elements * slots[k].elements_per_param;
    const bool zero = initial_values[k] == 0.0;
    DSCORE_ASSIGN_OR_RETURN(
        device::Buffer buffer,
        device.allocate(size_of(values, slots[k].dtype), placement, MemoryUse::kOptimizerState,
                        "offload optimizer " + slots[k].name, zero));
    if (!zero) fill_value(buffer.data(), slots[k].dtype, values, initial_values[k]);
    s->slot_buffers_.push_back(std::move(buffer));
  }
  DSCORE_ASSIGN_OR_RETURN(
      s->grads_, device.allocate(size_of(elements, side.grad_dtype), placement,
                                 MemoryUse::kOptimizerState, "offload host gradients", false));
  DSCORE_ASSIGN_OR_RETURN(s->write_back_, ParamWriteBack::create(side, s->copy_.get(), s->tile_,
                                                                 /*stage_fp32=*/false));
  s->tile_grads_.resize(static_cast<size_t>(s->tile_count()));
  return s;
}

HostOffloadState::~HostOffloadState() {
  // Nothing may still copy into the staging freed after this.
  if (copy_) (void)copy_->synchronize();
}

int64_t HostOffloadState::transfer_bytes() const {
  return static_cast<int64_t>(grads_.bytes()) + write_back_.bytes();
}

std::string HostOffloadState::describe() const {
  return std::string(options_.side.pinned ? "in pinned host memory" : "in host memory") +
         " (ZeRO-Offload: " + std::to_string(tile_count()) + " tile(s) of " +
         std::to_string(tile_) + " elements, gradients copied as they are reduced, " +
         format_bytes(static_cast<uint64_t>(transfer_bytes())) + " of host gradients and staging)";
}

Status HostOffloadState::for_each_tile(TileAccess access,
                                       const std::function<Status(const StateTile&)>& visit) {
  if (access != TileAccess::kRead) return update_walk(access, visit);
  StateTile tile;
  tile.begin = first_;
  tile.end = first_ + owned_;
  tile.master = static_cast<float*>(master_.data());
  for (device::Buffer& b : slot_buffers_) tile.slots.push_back(b.data());
  return visit(tile);
}

void HostOffloadState::copy_grads(int64_t begin, int64_t end) {
  const dscore_dtype gd = options_.side.grad_dtype;
  // A copy per tile, each followed by an event: the tile's gradients are
  // here once its last copy's event is done.
  for (int64_t t = begin / tile_; t * tile_ < end; ++t) {
    const int64_t a = std::max(begin, t * tile_), b = std::min(end, (t + 1) * tile_);
    options_.side.device->copy(
        static_cast<char*>(grads_.data()) + size_of(a, gd),
        static_cast<const char*>(options_.side.grads) + size_of(first_ + a, gd), size_of(b - a, gd),
        *copy_);
    TileGrads& tile = tile_grads_[static_cast<size_t>(t)];
    tile.copied = copy_->record();
    tile.order = ++copies_;
  }
}

void HostOffloadState::owned_grads_final(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                         const device::EventPtr& ready) {
  copy_->wait(ready);
  for (const auto& [begin, end] : ranges) {
    const int64_t b = std::max<int64_t>(begin - first_, 0), e = std::min(end - first_, owned_);
    if (b >= e) continue;
    copy_grads(b, e);
    reported_.emplace_back(b, e);
    reported_elements_ += e - b;
  }
}

void HostOffloadState::copy_unreported_grads() {
  std::sort(reported_.begin(), reported_.end());
  int64_t covered = 0;  // [0, covered) is reported
  for (const auto& [begin, end] : reported_) {
    if (begin > covered) copy_grads(covered, begin);
    covered = std::max(covered, end);
  }
  if (covered < owned_) copy_grads(covered, owned_);
  reported_.clear();
}

Status HostOffloadState::update_walk(TileAccess access,
                                     const std::function<Status(const StateTile&)>& visit) {
  // What the strategy did not report, once the compute stream is done (the
  // reduced gradients are final, the model done reading its parameters).
  copy_->wait(options_.side.compute->record());
  copy_unreported_grads();
  // Tiles in the order their gradients arrive, each once they have: the
  // update of the first overlaps the copies of the rest. (The optimizers
  // ZeRO steps are elementwise, so the order changes no number.)
  std::vector<int64_t> order(static_cast<size_t>(tile_count()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return tile_grads_[static_cast<size_t>(a)].order < tile_grads_[static_cast<size_t>(b)].order;
  });
  Status status = Status::Ok();
  for (size_t i = 0; i < order.size() && status.ok(); ++i) {
    const int64_t t = order[i];
    status = device::wait_for(tile_grads_[static_cast<size_t>(t)].copied);
    if (!status.ok()) break;
    const int64_t begin = t * tile_;  // of this state
    StateTile tile;
    tile.begin = first_ + begin;
    tile.end = first_ + std::min(begin + tile_, owned_);
    tile.master = static_cast<float*>(master_.data()) + begin;
    for (size_t k = 0; k < slots_.size(); ++k)
      tile.slots.push_back(static_cast<char*>(slot_buffers_[k].data()) +
                           size_of(begin * slots_[k].elements_per_param, slots_[k].dtype));
    tile.grads = static_cast<char*>(grads_.data()) + size_of(begin, options_.side.grad_dtype);
    status = write_back_.visit_then_send(access, &tile, visit);
  }
  // Every copy done, also after a failure: the staging and the master are
  // the host's again, and the model reads the new parameters.
  Status copies = copy_->synchronize();
  write_back_.release();
  for (TileGrads& tile : tile_grads_) tile = TileGrads{};
  if (!status.ok()) return status;
  if (copies.ok() && !logged_) {
    log_info("rank " + std::to_string(options_.rank) + ": ZeRO-Offload's first update: " +
             std::to_string(reported_elements_) + " of " + std::to_string(owned_) +
             " owned gradient elements came to the host as they were reduced");
    logged_ = true;
  }
  reported_elements_ = 0;
  return copies;
}

Status HostOffloadState::read(int state, int64_t first, int64_t count, void* dst) {
  if (first < first_ || first + count > first_ + owned_)
    return internal_error("a read of owned elements [" + std::to_string(first) + ", " +
                          std::to_string(first + count) + ") outside this state's [" +
                          std::to_string(first_) + ", " + std::to_string(first_ + owned_) + ")");
  first -= first_;
  if (state == kMasterState) {
    std::memcpy(dst, static_cast<const float*>(master_.data()) + first,
                size_of(count, DSCORE_DTYPE_F32));
    return Status::Ok();
  }
  if (state < 0 || static_cast<size_t>(state) >= slots_.size())
    return invalid_argument("no optimizer state " + std::to_string(state));
  const dscore_dtype dtype = slots_[static_cast<size_t>(state)].dtype;
  std::memcpy(dst,
              static_cast<const char*>(slot_buffers_[static_cast<size_t>(state)].data()) +
                  size_of(first, dtype),
              size_of(count, dtype));
  return Status::Ok();
}

}  // namespace dscore
