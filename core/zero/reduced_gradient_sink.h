// Where a ZeRO stage hands the accumulation boundary's reduced gradients
// as they become final, before the step: ZeRO-Offload's state (core/
// owned_state/host_offload_state.h) implements it to copy them to the host
// while backward goes on. The stage reports; the receiver decides what to
// copy and when.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/device/device.h"

namespace dscore::zero {

class ReducedGradientSink {
 public:
  virtual ~ReducedGradientSink() = default;
  // In the accumulation boundary's micro-step, on the thread that drives the strategy (the model's
  // hook calls): owned gradients [first, second) of each range are final
  // once `ready` is done. Ranges a stage does not report are final at the
  // step.
  virtual void owned_grads_final(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                 const device::EventPtr& ready) = 0;
};

// The sink a stage reports to, connected once the receiver exists
// and disconnected before it goes (the
// engine makes the optimizer's state after the strategy whose buffers it
// uses). Reports before connect() or after disconnect() go nowhere.
class GradientHandOff final : public ReducedGradientSink {
 public:
  void connect(ReducedGradientSink* receiver) { receiver_ = receiver; }
  void owned_grads_final(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                         const device::EventPtr& ready) override {
    if (receiver_ != nullptr && !ranges.empty()) receiver_->owned_grads_final(ranges, ready);
  }

 private:
  ReducedGradientSink* receiver_ = nullptr;
};

}  // namespace dscore::zero
