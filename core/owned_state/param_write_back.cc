#include "core/owned_state/param_write_back.h"

#include <dscore/cpp/dtype.hpp>

#include "core/owned_state/owned_state_util.h"
#include "core/tensor/dtype_ops.h"

namespace dscore {

Result<ParamWriteBack> ParamWriteBack::create(const DeviceSide& side, device::Stream* copy,
                                              int64_t tile_elements, bool stage_fp32) {
  ParamWriteBack w;
  w.side_ = side;
  w.copy_ = copy;
  w.tile_ = tile_elements;
  if (side.model_dtype == DSCORE_DTYPE_F32 && !stage_fp32) return w;
  const device::Placement placement =
      side.pinned ? device::Placement::kPinned : device::Placement::kHost;
  for (Staging& staging : w.staging_) {
    DSCORE_ASSIGN_OR_RETURN(
        staging.values,
        side.device->allocate(size_of(tile_elements, side.model_dtype), placement,
                              MemoryUse::kOptimizerState, "offload parameter staging", false));
  }
  return w;
}

int ParamWriteBack::take_staging() {
  const int taken = next_;
  next_ = 1 - next_;
  return taken;
}

Status ParamWriteBack::write(int64_t begin, int64_t count, const float* values) {
  if (count > tile_) return internal_error("a parameter write-back larger than its tile");
  if (!staging_[0].values) return copy_out(begin, count, values, nullptr);
  Staging* staging = &staging_[take_staging()];
  // The staging's previous tile must be on its way out first.
  DSCORE_RETURN_IF_ERROR(device::wait_for(staging->out));
  tensor::convert(values, DSCORE_DTYPE_F32, staging->values.data(), side_.model_dtype, count);
  return copy_out(begin, count, staging->values.data(), staging);
}

Result<void*> ParamWriteBack::next_staging() {
  if (side_.model_dtype == DSCORE_DTYPE_F32 || !staging_[0].values) return nullptr;
  const int taken = take_staging();
  DSCORE_RETURN_IF_ERROR(device::wait_for(staging_[taken].out));
  handed_out_ = taken;
  return staging_[taken].values.data();
}

Status ParamWriteBack::send(int64_t begin, int64_t count) {
  if (handed_out_ < 0 || count > tile_)
    return internal_error("a parameter send without a staging tile handed out, or larger than it");
  Staging* staging = &staging_[handed_out_];
  handed_out_ = -1;
  return copy_out(begin, count, staging->values.data(), staging);
}

Status ParamWriteBack::visit_then_send(TileAccess access, StateTile* tile,
                                       const std::function<Status(const StateTile&)>& visit) {
  if (access == TileAccess::kStep) {
    DSCORE_ASSIGN_OR_RETURN(tile->params16, next_staging());
  }
  DSCORE_RETURN_IF_ERROR(visit(*tile));
  const int64_t count = tile->end - tile->begin;
  if (tile->params16 != nullptr) return send(tile->begin, count);
  return write(tile->begin, count, tile->master);
}

Status ParamWriteBack::copy_out(int64_t begin, int64_t count, const void* from, Staging* staging) {
  const dscore_dtype md = side_.model_dtype;
  if (side_.model_params == nullptr) return side_.param_store->store_params16(begin, count, from);
  side_.device->copy(static_cast<char*>(side_.model_params) + size_of(begin, md), from,
                     size_of(count, md), *copy_);
  if (staging != nullptr) staging->out = copy_->record();
  return Status::Ok();
}

void ParamWriteBack::release() {
  handed_out_ = -1;
  for (Staging& s : staging_) s.out = nullptr;
}

int64_t ParamWriteBack::bytes() const {
  return static_cast<int64_t>(staging_[0].values.bytes() + staging_[1].values.bytes());
}

}  // namespace dscore
