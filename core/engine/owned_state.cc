#include "core/engine/owned_state.h"

#include <dscore/cpp/dtype.hpp>

#include <cstring>

#include "core/tensor/host_buffer.h"
#include "core/tensor/tensor_view.h"

namespace dscore {

void fill_value(void* dst, dscore_dtype dtype, int64_t count, double value) {
  if (value == 0.0) {
    std::memset(dst, 0, static_cast<size_t>(count) * sdk::dtype_size(dtype));
    return;
  }
  const std::vector<int64_t> shape = {count};
  dscore_tensor view = tensor::host_view(dst, dtype, shape, count, nullptr);
  for (int64_t i = 0; i < count; ++i) sdk::store_float(&view, i, static_cast<float>(value));
}

Result<std::unique_ptr<InMemoryState>> InMemoryState::create(
    const std::vector<zero::StateSlot>& slots, const std::vector<double>& initial_values,
    int64_t owned, float* master) {
  std::unique_ptr<InMemoryState> state(new InMemoryState());
  state->slots_ = slots;
  state->owned_ = owned;
  state->master_ = master;
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t values = owned * slots[k].elements_per_param;
    DSCORE_ASSIGN_OR_RETURN(
        CountedBuffer buffer,
        tensor::allocate_elements(values, slots[k].dtype, MemoryUse::kOptimizerState,
                                  "optimizer " + slots[k].name, tensor::Fill::kUninitialised));
    fill_value(buffer.get(), slots[k].dtype, values, initial_values[k]);
    state->buffers_.push_back(std::move(buffer));
  }
  return state;
}

Status InMemoryState::for_each_tile(TileAccess,
                                    const std::function<Status(const StateTile&)>& visit) {
  StateTile tile;
  tile.begin = 0;
  tile.end = owned_;
  tile.master = master_;
  for (CountedBuffer& b : buffers_) tile.slots.push_back(b.get());
  return visit(tile);
}

Status InMemoryState::read(int state, int64_t first, int64_t count, void* dst) {
  if (state == kMasterState) {
    std::memcpy(dst, master_ + first, static_cast<size_t>(count) * sizeof(float));
    return Status::Ok();
  }
  const size_t es = sdk::dtype_size(slots_[static_cast<size_t>(state)].dtype);
  std::memcpy(dst,
              static_cast<const char*>(buffers_[static_cast<size_t>(state)].get()) + first * es,
              static_cast<size_t>(count) * es);
  return Status::Ok();
}

}  // namespace dscore
