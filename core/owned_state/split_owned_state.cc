#include "core/owned_state/split_owned_state.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/tensor/host_buffer.h"

namespace dscore {

SplitOwnedState::SplitOwnedState(std::vector<Part> parts, std::vector<zero::StateSlot> slots,
                                 dscore_dtype grad_dtype, dscore_dtype model_dtype)
    : parts_(std::move(parts)),
      slots_(std::move(slots)),
      grad_dtype_(grad_dtype),
      model_dtype_(model_dtype) {
  int64_t at = 0;
  for (const Part& p : parts_) {
    begin_.push_back(at);
    at += p.domain->owned_numel();
  }
}

Status SplitOwnedState::for_each_tile(TileAccess access,
                                      const std::function<Status(const StateTile&)>& visit) {
  for (size_t i = 0; i < parts_.size(); ++i) {
    zero::ZeroStrategy& domain = *parts_[i].domain;
    const int64_t shift = begin_[i];
    DSCORE_RETURN_IF_ERROR(
        parts_[i].state->for_each_tile(access, [&](const StateTile& tile) -> Status {
          StateTile joined = tile;
          joined.begin += shift;
          joined.end += shift;
          if (joined.grads == nullptr)
            joined.grads = tensor::element_at(domain.owned_grads(), grad_dtype_, tile.begin);
          if (joined.params16 == nullptr && domain.owned_params16() != nullptr)
            joined.params16 = tensor::element_at(domain.owned_params16(), model_dtype_, tile.begin);
          return visit(joined);
        }));
  }
  return Status::Ok();
}

Status SplitOwnedState::read(int state, int64_t first, int64_t count, void* dst) {
  // `first` and `count` are values: a slot holds elements_per_param per element.
  int64_t per_element = 1;
  size_t value_size = sizeof(float);
  if (state != kMasterState) {
    const zero::StateSlot& slot = slots_.at(static_cast<size_t>(state));
    per_element = slot.elements_per_param;
    value_size = sdk::dtype_size(slot.dtype);
  }
  char* out = static_cast<char*>(dst);
  for (size_t i = 0; i < parts_.size() && count > 0; ++i) {
    const int64_t lo = begin_[i] * per_element;
    const int64_t hi = lo + parts_[i].domain->owned_numel() * per_element;
    if (first >= hi) continue;
    const int64_t n = std::min(count, hi - first);
    DSCORE_RETURN_IF_ERROR(parts_[i].state->read(state, first - lo, n, out));
    out += static_cast<size_t>(n) * value_size;
    first += n;
    count -= n;
  }
  if (count > 0) return internal_error("optimizer state read past the owned space");
  return Status::Ok();
}

std::string SplitOwnedState::describe() const {
  return parts_.front().state->describe() + " (dense and expert parts)";
}

}  // namespace dscore
