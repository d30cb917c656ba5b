#include "core/owned_state/owned_state_factory.h"

#include "core/base/logging.h"
#include "core/owned_state/host_offload_state.h"
#include "core/owned_state/low_precision_master_state.h"
#include "core/owned_state/nvme_state.h"
#include "core/owned_state/partial_offload_state.h"
#include "core/owned_state/split_owned_state.h"

namespace dscore {
namespace {

// For a state updated on the host: the strategy's owned gradients and
// parameters on the device, and how to reach them.
Result<DeviceSide> device_side(const OwnedStateContext& c, bool pinned) {
  zero::ZeroStrategy& strategy = *c.strategy;
  DeviceSide side;
  side.device = c.device;
  side.compute = c.compute;
  side.grads = strategy.owned_grads();
  side.grad_dtype = c.placement->grad_dtype;
  side.model_dtype = c.placement->model_dtype;
  side.pinned = pinned;
  const bool fp32 = side.model_dtype == DSCORE_DTYPE_F32;
  side.model_params = fp32 ? strategy.owned_master() : strategy.owned_params16();
  if (side.model_params == nullptr) {
    if (!strategy.params16_elsewhere())
      return internal_error("offload: the strategy names no parameters to update");
    side.param_store = &strategy;
  }
  return side;
}

Result<std::unique_ptr<OwnedState>> host_offload_state(const OwnedStateContext& c,
                                                       const std::vector<zero::StateSlot>& slots,
                                                       const std::vector<double>& initial) {
  zero::ZeroStrategy& strategy = *c.strategy;
  HostOffloadOptions options;
  DSCORE_ASSIGN_OR_RETURN(options.side, device_side(c, c.placement->optimizer_offload.pin_memory));
  const int64_t owned = strategy.owned_numel();
  // Partial offload keeps the first `kept` elements with the parameters;
  // the tiles are the offloaded rest's.
  const int64_t kept = zero::kept_on_device_elements(*c.placement, c.sub_group_size, owned);
  options.tile_elements = zero::offload_tile_elements(c.sub_group_size, owned - kept);
  options.rank = c.rank;
  const bool fp32 = options.side.model_dtype == DSCORE_DTYPE_F32;
  float* fp32_master = fp32 ? strategy.owned_master() : nullptr;
  std::unique_ptr<OwnedState> state;
  if (kept > 0) {
    DSCORE_ASSIGN_OR_RETURN(
        state, PartialOffloadState::create(options, kept, slots, initial, owned, fp32_master,
                                           *c.model, strategy.owned_segments()));
  } else {
    DSCORE_ASSIGN_OR_RETURN(
        state, HostOffloadState::create(options, slots, initial, owned, fp32_master, *c.model,
                                        strategy.owned_segments()));
  }
  return state;
}

Result<std::unique_ptr<OwnedState>> nvme_state(const OwnedStateContext& c,
                                               const std::vector<zero::StateSlot>& slots,
                                               const std::vector<double>& initial) {
  zero::ZeroStrategy& strategy = *c.strategy;
  const config::OffloadConfig& offload = c.placement->optimizer_offload;
  NvmeStateOptions options;
  options.folder = c.swap_folder;
  options.sub_group_size = c.sub_group_size;
  options.pipeline_read = offload.pipeline_read;
  options.pipeline_write = offload.pipeline_write;
  if (!c.device->memory_is_host()) {
    DSCORE_ASSIGN_OR_RETURN(DeviceSide side, device_side(c, offload.pin_memory));
    options.staging = std::move(side);
  }
  const bool fp32 = c.placement->model_dtype == DSCORE_DTYPE_F32;
  DSCORE_ASSIGN_OR_RETURN(
      auto state, NvmeState::create(c.swapper, options, slots, initial, strategy.owned_numel(),
                                    fp32 ? strategy.owned_master() : nullptr, *c.model,
                                    strategy.owned_segments()));
  return std::unique_ptr<OwnedState>(std::move(state));
}

// One in-memory state per domain of a strategy that joins several
// (split_owned_state.h).
Result<std::unique_ptr<OwnedState>> split_state(const OwnedStateContext& c,
                                                const std::vector<zero::ZeroStrategy*>& domains,
                                                const std::vector<zero::StateSlot>& slots,
                                                const std::vector<double>& initial) {
  std::vector<SplitOwnedState::Part> parts;
  for (zero::ZeroStrategy* domain : domains) {
    DSCORE_ASSIGN_OR_RETURN(auto state,
                            InMemoryState::create(slots, initial, domain->owned_numel(),
                                                  domain->owned_master(), c.device, c.compute));
    parts.push_back({std::move(state), domain});
  }
  return std::unique_ptr<OwnedState>(std::make_unique<SplitOwnedState>(
      std::move(parts), slots, c.placement->grad_dtype, c.placement->model_dtype));
}

}  // namespace

Result<std::unique_ptr<OwnedState>> make_owned_state(const OwnedStateContext& c,
                                                     const std::vector<zero::StateSlot>& slots,
                                                     const std::vector<double>& initial) {
  if (const auto domains = c.strategy->domains(); domains.size() > 1) {
    if (c.placement->optimizer_state != config::Home::kDevice)
      return unimplemented("offloading the optimizer state of an expert-parallel run");
    return split_state(c, domains, slots, initial);
  }
  std::unique_ptr<OwnedState> state;
  switch (c.placement->optimizer_state) {
    case config::Home::kDevice: {
      if (const std::string why = config::optimizer_offload_kept_reason(*c.placement);
          !why.empty() && c.rank == 0)
        log_info(why);
      if (c.placement->low_precision_master()) {
        const int64_t owned = c.strategy->owned_numel();
        DSCORE_ASSIGN_OR_RETURN(state, LowPrecisionMasterState::create(
                                           slots, initial, owned, c.strategy->owned_params16(),
                                           c.placement->model_dtype, c.placement->state_dtype,
                                           zero::low_precision_tile_elements(owned)));
        break;
      }
      // After the optimizer's work on the compute stream.
      DSCORE_ASSIGN_OR_RETURN(
          auto in_memory, InMemoryState::create(slots, initial, c.strategy->owned_numel(),
                                                c.strategy->owned_master(), c.device, c.compute));
      return std::unique_ptr<OwnedState>(std::move(in_memory));
    }
    case config::Home::kHost: {
      DSCORE_ASSIGN_OR_RETURN(state, host_offload_state(c, slots, initial));
      break;
    }
    case config::Home::kNvme: {
      if (c.swapper == nullptr)
        return failed_precondition("the optimizer state on NVMe needs the \"nvme\" swapper");
      DSCORE_ASSIGN_OR_RETURN(state, nvme_state(c, slots, initial));
      break;
    }
  }
  log_info("rank " + std::to_string(c.rank) + ": optimizer state " + state->describe());
  return state;
}

}  // namespace dscore
