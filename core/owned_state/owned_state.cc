#include "core/owned_state/owned_state.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "core/tensor/host_buffer.h"
#include "core/tensor/tensor_view.h"
#include "core/zero/zero_memory.h"

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
    int64_t owned, float* master, device::Device* device, device::Stream* stream) {
  std::unique_ptr<InMemoryState> state(new InMemoryState());
  state->slots_ = slots;
  state->owned_ = owned;
  state->master_ = master;
  state->device_ = device;
  state->stream_ = stream;
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t values = owned * slots[k].elements_per_param;
    const bool zero = initial_values[k] == 0.0;
    DSCORE_ASSIGN_OR_RETURN(
        device::Buffer buffer,
        zero::allocate_buffer(device, values, slots[k].dtype, MemoryUse::kOptimizerState,
                              "optimizer " + slots[k].name,
                              zero ? tensor::Fill::kZero : tensor::Fill::kUninitialised));
    // Other initial values through bounded host staging, filled once and
    // uploaded piece by piece.
    const size_t es = sdk::dtype_size(slots[k].dtype);
    constexpr int64_t kPiece = 1 << 20;
    const int64_t piece = zero ? 0 : std::min(values, kPiece);
    std::vector<char> staging(static_cast<size_t>(piece) * es);
    if (piece > 0) fill_value(staging.data(), slots[k].dtype, piece, initial_values[k]);
    for (int64_t done = 0; piece > 0 && done < values; done += kPiece) {
      const int64_t n = std::min(kPiece, values - done);
      DSCORE_RETURN_IF_ERROR(zero::upload(device, stream,
                                          static_cast<char*>(buffer.data()) + done * es,
                                          staging.data(), static_cast<size_t>(n) * es));
    }
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
  for (device::Buffer& b : buffers_) tile.slots.push_back(b.data());
  return visit(tile);
}

Status InMemoryState::read(int state, int64_t first, int64_t count, void* dst) {
  if (state == kMasterState)
    return zero::download(device_, stream_, dst, master_ + first,
                          static_cast<size_t>(count) * sizeof(float));
  const size_t es = sdk::dtype_size(slots_[static_cast<size_t>(state)].dtype);
  return zero::download(
      device_, stream_, dst,
      static_cast<const char*>(buffers_[static_cast<size_t>(state)].data()) + first * es,
      static_cast<size_t>(count) * es);
}

}  // namespace dscore
