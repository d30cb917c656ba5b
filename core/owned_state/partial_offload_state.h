// Partial offload (offload_optimizer.ratio < 1 at ZeRO stage 3, DeepSpeed's
// ZeRO-Offload++): the owned space split in two states, each wholly in one
// place. Elements [0, kept) (zero::kept_on_device_elements: DeepSpeed's
// first sub-groups) keep their fp32 master and optimizer slots with the
// parameters, in the engine's device memory, and the engine updates them
// there (an InMemoryState; for 16-bit models this state allocates that
// part's master, which full offload keeps on the host). Elements [kept,
// owned) are ZeRO-Offload's (a HostOffloadState from element kept).
//
// The optimizer steps the two one after the other (parts()): the kept part
// on the engine's compute stream, then the offloaded part on the host.
// Checkpoints see one owned space: tiles in owned order, reads split at
// kept. The numbers do not depend on the split: the optimizers ZeRO steps
// are elementwise.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/owned_state/host_offload_state.h"

namespace dscore {

class PartialOffloadState final : public OwnedState {
 public:
  // `kept` in (0, owned]: elements kept on the device (all of them with
  // ratio 0: then nothing is offloaded). `strategy_master`:
  // the strategy's owned fp32 master for fp32 models (device memory; the
  // kept part's master is it), nullptr for 16-bit models (this state then
  // allocates the kept part's master on the device, initialised through the
  // model's init_param over `segments`). `offload` names the device side
  // for the offloaded part; its `first` is set to `kept` here.
  static Result<std::unique_ptr<PartialOffloadState>> create(
      HostOffloadOptions offload, int64_t kept, const std::vector<zero::StateSlot>& slots,
      const std::vector<double>& initial_values, int64_t owned, float* strategy_master,
      const Model& model, const std::vector<zero::OwnedSegment>& segments);

  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override;
  std::vector<OwnedState*> parts() override;
  int64_t transfer_bytes() const override { return offloaded_ ? offloaded_->transfer_bytes() : 0; }
  void boundary_micro_step() override {
    if (offloaded_) offloaded_->boundary_micro_step();
  }
  void owned_grads_final(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                         const device::EventPtr& ready) override {
    if (offloaded_) offloaded_->owned_grads_final(ranges, ready);
  }

 private:
  PartialOffloadState() = default;

  int64_t kept_elements_ = 0;
  int64_t owned_ = 0;
  std::vector<zero::StateSlot> slots_;
  device::Buffer kept_master_;  // 16-bit models: the kept part's fp32 master
  std::unique_ptr<InMemoryState> kept_;
  std::unique_ptr<HostOffloadState> offloaded_;  // null when kept is all
};

}  // namespace dscore
