// EngineClock: StepPhase begin/end pairs summed into EngineTiming.
#include "core/engine/engine_timing.h"

#include <chrono>

namespace dscore {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int64_t* EngineClock::counter(StepPhase phase) {
  switch (phase) {
    case StepPhase::kForwardBackward:
      return &timing_.forward_backward_ns;
    case StepPhase::kHook:
      return &timing_.hooks_ns;
    case StepPhase::kFinishReductions:
      return &timing_.reduce_finish_ns;
    case StepPhase::kStepCall:
      return &timing_.step_ns;
    case StepPhase::kStatistics:
      return &timing_.statistics_ns;
    case StepPhase::kOptimizer:
      return &timing_.optimizer_ns;
    case StepPhase::kStep:
      return nullptr;  // inside kStepCall
  }
  return nullptr;
}

void EngineClock::on_phase_begin(StepPhase phase) {
  if (phase == StepPhase::kForwardBackward) timing_.micro_steps += 1;
  started_[static_cast<size_t>(phase)] = now_ns();
}

void EngineClock::on_phase_end(StepPhase phase) {
  if (int64_t* c = counter(phase)) *c += now_ns() - started_[static_cast<size_t>(phase)];
}

EngineTiming EngineClock::timing() const {
  EngineTiming t = timing_;
  t.comm_wait_ns = stream_.blocked_ns() - blocked_at_reset_;
  return t;
}

void EngineClock::reset() {
  timing_ = EngineTiming{};
  blocked_at_reset_ = stream_.blocked_ns();
}

}  // namespace dscore
