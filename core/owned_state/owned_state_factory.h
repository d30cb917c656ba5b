// Makes the optimizer state where the placement puts it: with the
// parameters (InMemoryState), in host memory (ZeRO-Offload:
// HostOffloadState, or PartialOffloadState for offload_optimizer.ratio < 1)
// or on NVMe (NvmeState). The engine calls it once the strategy has
// allocated the owned space the state works over.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/config/placement.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/offload/swapper.h"
#include "core/owned_state/owned_state.h"
#include "core/zero/zero_strategy.h"

namespace dscore {

struct OwnedStateContext {
  const config::Placement* placement = nullptr;
  int64_t sub_group_size = 0;              // zero_optimization.sub_group_size: the tiles
  zero::ZeroStrategy* strategy = nullptr;  // initialised: its owned space
  const Model* model = nullptr;            // init_param for 16-bit masters
  device::Device* device = nullptr;        // the engine's
  device::Stream* compute = nullptr;       // the engine's compute stream
  offload::Swapper* swapper = nullptr;     // with the state on NVMe
  std::string swap_folder;                 // with the state on NVMe: this rank's
  int rank = 0;                            // for the log
};

// The optimizer's declared slots and their initial values.
Result<std::unique_ptr<OwnedState>> make_owned_state(const OwnedStateContext& context,
                                                     const std::vector<zero::StateSlot>& slots,
                                                     const std::vector<double>& initial_values);

}  // namespace dscore
