#include "core/engine/host_offload_state.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/tensor/dtype_ops.h"
#include "core/zero/zero_memory.h"

namespace dscore {
namespace {

size_t size_of(int64_t elements, dscore_dtype dtype) {
  return static_cast<size_t>(elements) * sdk::dtype_size(dtype);
}

std::string human_bytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

Result<std::unique_ptr<HostOffloadState>> HostOffloadState::create(
    const HostOffloadOptions& options, const std::vector<zero::StateSlot>& slots,
    const std::vector<double>& initial_values, int64_t owned, const float* fp32_params,
    const Model& model, const std::vector<zero::OwnedSegment>& segments) {
  if (options.device == nullptr || options.compute == nullptr || options.tile_elements <= 0)
    return internal_error(
        "HostOffloadState needs the engine's device, its compute stream and a "
        "tile size");
  std::unique_ptr<HostOffloadState> s(new HostOffloadState());
  s->options_ = options;
  s->slots_ = slots;
  s->owned_ = owned;
  s->tile_ = options.tile_elements;
  device::Device& device = *options.device;
  const device::Placement placement =
      options.pinned ? device::Placement::kPinned : device::Placement::kHost;
  DSCORE_ASSIGN_OR_RETURN(s->copy_, device.create_stream("offload copies"));
  const int64_t elements = std::max<int64_t>(owned, 1);
  DSCORE_ASSIGN_OR_RETURN(s->master_,
                          device.allocate(size_of(elements, DSCORE_DTYPE_F32), placement,
                                          MemoryUse::kMaster, "offload master fp32"));
  float* master = static_cast<float*>(s->master_.data());
  if (fp32_params != nullptr) {
    DSCORE_RETURN_IF_ERROR(zero::download(options.device, options.compute, master, fp32_params,
                                          size_of(owned, DSCORE_DTYPE_F32)));
  } else {
    // init_param is a function of parameter and element: the values the
    // strategy's 16-bit parameters were made from.
    for (const zero::OwnedSegment& seg : segments)
      DSCORE_RETURN_IF_ERROR(
          model.init_param(seg.param, seg.element, seg.numel, master + seg.offset));
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
  for (Staging& staging : s->staging_) {
    DSCORE_ASSIGN_OR_RETURN(staging.grads, device.allocate(size_of(s->tile_, options.grad_dtype),
                                                           placement, MemoryUse::kOptimizerState,
                                                           "offload gradient staging", false));
    if (options.model_dtype != DSCORE_DTYPE_F32) {
      DSCORE_ASSIGN_OR_RETURN(
          staging.params,
          device.allocate(size_of(s->tile_, options.model_dtype), placement,
                          MemoryUse::kOptimizerState, "offload parameter staging", false));
    }
  }
  return s;
}

HostOffloadState::~HostOffloadState() {
  // Nothing may still copy into the staging freed after this.
  if (copy_) (void)copy_->synchronize();
}

int64_t HostOffloadState::tile_buffer_bytes() const {
  int64_t bytes = 0;
  for (const Staging& s : staging_)
    bytes += static_cast<int64_t>(s.grads.bytes() + s.params.bytes());
  return bytes;
}

std::string HostOffloadState::describe() const {
  return std::string(options_.pinned ? "in pinned host memory" : "in host memory") +
         " (ZeRO-Offload: " + std::to_string(tile_count()) + " tile(s) of " +
         std::to_string(tile_) + " elements, 2 staging tiles of " +
         human_bytes(tile_buffer_bytes() / 2) + ")";
}

Status HostOffloadState::for_each_tile(TileAccess access,
                                       const std::function<Status(const StateTile&)>& visit) {
  if (access == TileAccess::kUpdate) return update_walk(visit);
  StateTile tile;
  tile.begin = 0;
  tile.end = owned_;
  tile.master = static_cast<float*>(master_.data());
  for (device::Buffer& b : slot_buffers_) tile.slots.push_back(b.data());
  return visit(tile);
}

void HostOffloadState::fetch_grads(int64_t tile, Staging& staging) {
  const int64_t begin = tile * tile_;
  const int64_t n = std::min(tile_, owned_ - begin);
  const dscore_dtype gd = options_.grad_dtype;
  options_.device->copy(staging.grads.data(),
                        static_cast<const char*>(options_.grads) + size_of(begin, gd),
                        size_of(n, gd), *copy_);
  staging.grads_in = copy_->record();
}

Status HostOffloadState::write_params(int64_t tile, Staging& staging) {
  const int64_t begin = tile * tile_;
  const int64_t n = std::min(tile_, owned_ - begin);
  const dscore_dtype md = options_.model_dtype;
  const float* master = static_cast<const float*>(master_.data()) + begin;
  const void* values = master;  // fp32 models: the master tile itself
  if (md != DSCORE_DTYPE_F32) {
    // The staging's previous tile must be on its way out first.
    DSCORE_RETURN_IF_ERROR(device::wait_for(staging.params_out));
    tensor::convert(master, DSCORE_DTYPE_F32, staging.params.data(), md, n);
    values = staging.params.data();
  }
  if (options_.model_params == nullptr) return options_.store_params(begin, n, values);
  options_.device->copy(static_cast<char*>(options_.model_params) + size_of(begin, md), values,
                        size_of(n, md), *copy_);
  staging.params_out = copy_->record();
  return Status::Ok();
}

Status HostOffloadState::update_walk(const std::function<Status(const StateTile&)>& visit) {
  // The reduced gradients are final, and the model done reading its
  // parameters, once the compute stream is.
  copy_->wait(options_.compute->record());
  const int64_t tiles = tile_count();
  Status status = Status::Ok();
  if (tiles > 0) fetch_grads(0, staging_[0]);
  for (int64_t t = 0; t < tiles && status.ok(); ++t) {
    Staging& current = staging_[t % 2];
    // The other staging's gradients were tile t-1's, updated already.
    if (t + 1 < tiles) fetch_grads(t + 1, staging_[(t + 1) % 2]);
    status = device::wait_for(current.grads_in);
    if (!status.ok()) break;
    StateTile tile;
    tile.begin = t * tile_;
    tile.end = std::min(tile.begin + tile_, owned_);
    tile.master = static_cast<float*>(master_.data()) + tile.begin;
    for (size_t k = 0; k < slots_.size(); ++k)
      tile.slots.push_back(static_cast<char*>(slot_buffers_[k].data()) +
                           size_of(tile.begin * slots_[k].elements_per_param, slots_[k].dtype));
    tile.grads = current.grads.data();
    status = visit(tile);
    if (status.ok()) status = write_params(t, current);
  }
  // Every copy done, also after a failure: the staging and the master are
  // the host's again, and the model reads the new parameters.
  Status copies = copy_->synchronize();
  for (Staging& s : staging_) s.grads_in = s.params_out = nullptr;
  return status.ok() ? copies : status;
}

Status HostOffloadState::read(int state, int64_t first, int64_t count, void* dst) {
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
