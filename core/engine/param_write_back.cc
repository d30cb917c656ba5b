#include "core/engine/param_write_back.h"

#include <dscore/cpp/dtype.hpp>

#include "core/tensor/dtype_ops.h"

namespace dscore {
namespace {

size_t size_of(int64_t elements, dscore_dtype dtype) {
  return static_cast<size_t>(elements) * sdk::dtype_size(dtype);
}

}  // namespace

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

Status ParamWriteBack::write(int64_t begin, int64_t count, const float* values) {
  if (count > tile_) return internal_error("a parameter write-back larger than its tile");
  const dscore_dtype md = side_.model_dtype;
  const void* from = values;
  Staging* staging = nullptr;
  if (staging_[0].values) {
    staging = &staging_[next_];
    next_ = 1 - next_;
    // The staging's previous tile must be on its way out first.
    DSCORE_RETURN_IF_ERROR(device::wait_for(staging->out));
    tensor::convert(values, DSCORE_DTYPE_F32, staging->values.data(), md, count);
    from = staging->values.data();
  }
  if (side_.model_params == nullptr) return side_.store_params(begin, count, from);
  side_.device->copy(static_cast<char*>(side_.model_params) + size_of(begin, md), from,
                     size_of(count, md), *copy_);
  if (staging != nullptr) staging->out = copy_->record();
  return Status::Ok();
}

void ParamWriteBack::release() {
  for (Staging& s : staging_) s.out = nullptr;
}

int64_t ParamWriteBack::bytes() const {
  return static_cast<int64_t>(staging_[0].values.bytes() + staging_[1].values.bytes());
}

}  // namespace dscore
