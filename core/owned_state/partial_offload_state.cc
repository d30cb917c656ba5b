#include "core/owned_state/partial_offload_state.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/base/strings.h"
#include "core/zero/zero_memory.h"

namespace dscore {

Result<std::unique_ptr<PartialOffloadState>> PartialOffloadState::create(
    HostOffloadOptions offload, int64_t kept, const std::vector<zero::StateSlot>& slots,
    const std::vector<double>& initial_values, int64_t owned, float* strategy_master,
    const Model& model, const std::vector<zero::OwnedSegment>& segments) {
  if (kept <= 0 || kept > owned)
    return internal_error("a partial offload keeping " + std::to_string(kept) + " of " +
                          std::to_string(owned) + " owned elements on the device");
  const DeviceSide& side = offload.side;
  std::unique_ptr<PartialOffloadState> s(new PartialOffloadState());
  s->kept_elements_ = kept;
  s->owned_ = owned;
  s->slots_ = slots;
  float* master = strategy_master;
  if (master == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(
        s->kept_master_,
        zero::allocate_buffer(side.device, kept, DSCORE_DTYPE_F32, MemoryUse::kMaster,
                              "master fp32 (kept on the device by offload_optimizer.ratio)",
                              tensor::Fill::kZero));
    master = static_cast<float*>(s->kept_master_.data());
    for (const zero::OwnedSegment& seg : segments) {
      const int64_t end = std::min(seg.offset + seg.numel, kept);
      if (seg.offset < end)
        DSCORE_RETURN_IF_ERROR(zero::init_owned(model, seg.param, seg.element, end - seg.offset,
                                                master + seg.offset, nullptr, DSCORE_DTYPE_F32,
                                                side.device, side.compute));
    }
  }
  DSCORE_ASSIGN_OR_RETURN(s->kept_, InMemoryState::create(slots, initial_values, kept, master,
                                                          side.device, side.compute));
  if (kept == owned) return s;  // ratio 0: nothing offloaded
  offload.first = kept;
  DSCORE_ASSIGN_OR_RETURN(s->offloaded_,
                          HostOffloadState::create(offload, slots, initial_values, owned - kept,
                                                   strategy_master, model, segments));
  return s;
}

Status PartialOffloadState::for_each_tile(TileAccess access,
                                          const std::function<Status(const StateTile&)>& visit) {
  DSCORE_RETURN_IF_ERROR(kept_->for_each_tile(access, visit));
  return offloaded_ ? offloaded_->for_each_tile(access, visit) : Status::Ok();
}

Status PartialOffloadState::read(int state, int64_t first, int64_t count, void* dst) {
  const int64_t in_kept = std::clamp<int64_t>(kept_elements_ - first, 0, count);
  if (in_kept > 0) DSCORE_RETURN_IF_ERROR(kept_->read(state, first, in_kept, dst));
  if (in_kept == count || !offloaded_) return Status::Ok();
  // The rest from the offloaded part, after the kept values in dst.
  size_t bytes_per_element = sizeof(float);
  if (state != kMasterState) {
    if (state < 0 || static_cast<size_t>(state) >= slots_.size())
      return invalid_argument("no optimizer state " + std::to_string(state));
    const zero::StateSlot& slot = slots_[static_cast<size_t>(state)];
    bytes_per_element = sdk::dtype_size(slot.dtype) * slot.elements_per_param;
  }
  return offloaded_->read(
      state, first + in_kept, count - in_kept,
      static_cast<char*>(dst) + static_cast<size_t>(in_kept) * bytes_per_element);
}

std::vector<OwnedState*> PartialOffloadState::parts() {
  if (!offloaded_) return {kept_.get()};
  return {kept_.get(), offloaded_.get()};
}

std::string PartialOffloadState::describe() const {
  const std::string kept = "owned elements [0, " + std::to_string(kept_elements_) +
                           ") with the parameters (offload_optimizer.ratio)";
  if (!offloaded_) return kept + ", nothing offloaded";
  return kept + ", the other " + std::to_string(owned_ - kept_elements_) + " " +
         offloaded_->describe();
}

}  // namespace dscore
