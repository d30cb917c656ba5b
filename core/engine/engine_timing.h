// EngineTiming: where forward_backward() and step() spent their time, as the
// engine counts it for benchmarks (bench/zero_throughput.cc reads it through
// engine_testing.h), and EngineClock, the step observer that counts it.
// Engine overhead is what is left:
// wall - model compute - optimizer - gradient statistics - comm wait.
#pragma once

#include <array>
#include <cstdint>

#include "core/device/device.h"
#include "core/engine/step_observer.h"

namespace dscore {

// Summed since the last reset, in nanoseconds.
struct EngineTiming {
  int64_t micro_steps = 0;
  int64_t steps = 0;  // accumulation boundaries
  int64_t forward_backward_ns = 0;
  int64_t hooks_ns = 0;          // inside acquire/release/grads_ready
  int64_t reduce_finish_ns = 0;  // after the model returned: finishing reductions
  int64_t step_ns = 0;
  int64_t optimizer_ns = 0;   // the optimizer plugin over the owned space
  int64_t statistics_ns = 0;  // gradient norm and overflow pass, zeroing
  int64_t comm_wait_ns = 0;   // inside the comm stream's submit/wait (in hooks and in step)
  int64_t model_ns() const { return forward_backward_ns - hooks_ns - reduce_finish_ns; }
  int64_t wall_ns() const { return forward_backward_ns + step_ns; }
  int64_t overhead_ns() const {
    return wall_ns() - model_ns() - optimizer_ns - statistics_ns - comm_wait_ns;
  }
};

// Every engine has one, first among its observers.
class EngineClock final : public StepObserver {
 public:
  explicit EngineClock(const device::Stream& stream)
      : stream_(stream), blocked_at_reset_(stream.blocked_ns()) {}

  void on_phase_begin(StepPhase phase) override;
  void on_phase_end(StepPhase phase) override;
  void on_boundary(const StepReport&, std::vector<ScalarEvent>*) override { timing_.steps += 1; }

  EngineTiming timing() const;
  void reset();

 private:
  int64_t* counter(StepPhase phase);
  const device::Stream& stream_;
  EngineTiming timing_;
  std::array<int64_t, kStepPhaseCount> started_{};
  int64_t blocked_at_reset_ = 0;
};

}  // namespace dscore
