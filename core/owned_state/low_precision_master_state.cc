#include "core/owned_state/low_precision_master_state.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"

namespace dscore {
Result<std::unique_ptr<LowPrecisionMasterState>> LowPrecisionMasterState::create(
    const std::vector<zero::StateSlot>& slots, const std::vector<double>& initial_values,
    int64_t owned, void* params16, dscore_dtype model_dtype, dscore_dtype state_dtype,
    int64_t tile_elements) {
  if (params16 == nullptr || model_dtype == DSCORE_DTYPE_F32)
    return internal_error("a 16-bit master needs the strategy's owned 16-bit parameters");
  std::unique_ptr<LowPrecisionMasterState> state(new LowPrecisionMasterState());
  state->slots_ = slots;
  state->owned_ = owned;
  state->tile_ = std::max<int64_t>(1, std::min(tile_elements, owned));
  state->params16_ = params16;
  state->model_dtype_ = model_dtype;
  state->state_dtype_ = state_dtype;
  DSCORE_ASSIGN_OR_RETURN(
      state->master_, tensor::allocate_elements(state->tile_, DSCORE_DTYPE_F32, MemoryUse::kBuffers,
                                                "master tile fp32"));
  for (size_t k = 0; k < slots.size(); ++k) {
    const dscore_dtype dtype = state->stored(k);
    const int64_t values = owned * slots[k].elements_per_param;
    DSCORE_ASSIGN_OR_RETURN(
        CountedBuffer storage,
        tensor::allocate_elements(values, dtype, MemoryUse::kOptimizerState,
                                  "optimizer " + slots[k].name + " " + sdk::dtype_name(dtype)));
    fill_value(storage.get(), dtype, values, initial_values[k]);
    state->storage_.push_back(std::move(storage));
    CountedBuffer wide;
    if (dtype != slots[k].dtype) {
      DSCORE_ASSIGN_OR_RETURN(
          wide,
          tensor::allocate_elements(state->tile_ * slots[k].elements_per_param, slots[k].dtype,
                                    MemoryUse::kBuffers, "optimizer " + slots[k].name + " tile"));
    }
    state->wide_.push_back(std::move(wide));
  }
  return state;
}

dscore_dtype LowPrecisionMasterState::stored(size_t k) const {
  // bf16_optimizer_states narrows the fp32 slots; others keep theirs.
  return slots_[k].dtype == DSCORE_DTYPE_F32 ? state_dtype_ : slots_[k].dtype;
}

Status LowPrecisionMasterState::for_each_tile(
    TileAccess access, const std::function<Status(const StateTile&)>& visit) {
  float* master = static_cast<float*>(master_.get());
  for (int64_t begin = 0; begin < owned_; begin += tile_) {
    const int64_t n = std::min(tile_, owned_ - begin);
    StateTile tile;
    tile.begin = begin;
    tile.end = begin + n;
    tile.master = master;
    tensor::convert(tensor::element_at(params16_, model_dtype_, begin), model_dtype_, master,
                    DSCORE_DTYPE_F32, n);
    // The optimizer writes the new parameters: the master, narrowed.
    if (access == TileAccess::kStep)
      tile.params16 = tensor::element_at(params16_, model_dtype_, begin);
    for (size_t k = 0; k < slots_.size(); ++k) {
      const int64_t epp = slots_[k].elements_per_param;
      void* stored_at = tensor::element_at(storage_[k].get(), stored(k), begin * epp);
      if (!wide_[k]) {
        tile.slots.push_back(stored_at);
        continue;
      }
      tensor::convert(stored_at, stored(k), wide_[k].get(), slots_[k].dtype, n * epp);
      tile.slots.push_back(wide_[k].get());
    }
    DSCORE_RETURN_IF_ERROR(visit(tile));
    if (access == TileAccess::kRead) continue;
    if (access == TileAccess::kUpdate)
      tensor::convert(master, DSCORE_DTYPE_F32, tensor::element_at(params16_, model_dtype_, begin),
                      model_dtype_, n);
    for (size_t k = 0; k < slots_.size(); ++k)
      if (wide_[k])
        tensor::convert(
            wide_[k].get(), slots_[k].dtype,
            tensor::element_at(storage_[k].get(), stored(k), begin * slots_[k].elements_per_param),
            stored(k), n * slots_[k].elements_per_param);
  }
  return Status::Ok();
}

Status LowPrecisionMasterState::read(int state, int64_t first, int64_t count, void* dst) {
  if (state == kMasterState) {
    tensor::convert(tensor::element_at(params16_, model_dtype_, first), model_dtype_, dst,
                    DSCORE_DTYPE_F32, count);
    return Status::Ok();
  }
  const size_t k = static_cast<size_t>(state);
  tensor::convert(tensor::element_at(storage_[k].get(), stored(k), first), stored(k), dst,
                  slots_[k].dtype, count);
  return Status::Ok();
}

std::string LowPrecisionMasterState::describe() const {
  return std::string("in host memory: master ") + sdk::dtype_name(model_dtype_) +
         " (the parameters), state " + sdk::dtype_name(state_dtype_) + ", fp32 tiles of " +
         std::to_string(tile_) + " elements";
}

}  // namespace dscore
