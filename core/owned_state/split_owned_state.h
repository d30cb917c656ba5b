// The optimizer state of a strategy whose owned space joins several
// (ZeroStrategy::domains(): expert parallelism's dense and expert domains,
// core/zero/expert_split_zero.h): one state per domain, each over its
// domain's owned space, visited one after the other with their owned-space
// offsets shifted to the joined space's. Each tile names its domain's
// gradients and 16-bit parameters (StateTile::grads, ::params16), since the
// joined strategy has no single buffer of either.
#pragma once

#include <dscore/model.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/owned_state/owned_state.h"

namespace dscore {

class SplitOwnedState final : public OwnedState {
 public:
  struct Part {
    std::unique_ptr<OwnedState> state;  // over the domain's owned space
    zero::ZeroStrategy* domain = nullptr;
  };
  SplitOwnedState(std::vector<Part> parts, std::vector<zero::StateSlot> slots,
                  dscore_dtype grad_dtype, dscore_dtype model_dtype);

  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override;

 private:
  std::vector<Part> parts_;
  std::vector<zero::StateSlot> slots_;
  std::vector<int64_t> begin_;  // each part's first element in the joined space
  dscore_dtype grad_dtype_, model_dtype_;
};

}  // namespace dscore
