// What watches the training step from outside it: the wall_clock_breakdown
// timers (phase_timers.h), the flops profiler (flops_probe.h), the engine's
// own time accounting (engine_timing.h) and `dscore run`'s progress
// (progress.h). Engine::forward_backward and Engine::step call every
// observer at the same points, in the order they were added.
#pragma once

#include <dscore/model.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/monitor_hub.h"

namespace dscore {

// The timed parts of a micro-step and a step:
//   kForwardBackward   the whole forward_backward() call
//     kHook            one acquire, release or grads_ready call of the model
//     kFinishReductions  after the model returned: the micro-step's reductions finishing
//   kStepCall          the whole step() call, monitors and reports included
//     kStep            the accumulation boundary's work (DeepSpeed's "step" timer; empty off it)
//       kStatistics    gradient statistics, zeroing the gradients
//       kOptimizer     the optimizer plugin over the owned space
enum class StepPhase {
  kForwardBackward,
  kHook,
  kFinishReductions,
  kStepCall,
  kStep,
  kStatistics,
  kOptimizer
};
inline constexpr size_t kStepPhaseCount = 7;

// A completed accumulation boundary, as every rank agrees on it.
struct StepReport {
  int64_t global_steps = 0;    // after this step
  int64_t global_samples = 0;  // after this step
  int64_t samples_before = 0;  // global_samples before it
  int64_t skipped_steps = 0;
  bool applied = false;    // false: overflow or non-finite gradients skipped the update
  double loss = 0;         // mean micro-batch loss over all ranks
  double rank_loss = 0;    // this rank's
  double grad_norm = 0;    // unscaled, before clipping; -1 on overflow
  double loss_scale = 1;   // after this step's update
  std::vector<double> lr;  // per parameter group, for the next update
  // What the model measured besides its loss (model.h metrics: MoE's aux
  // loss, dropped routes, expert loads), over the cycle and the
  // data-parallel ranks, by name.
  std::vector<std::pair<std::string, double>> metrics;
};

// Every method has an empty default; an observer overrides what it needs.
// Called on the training thread; an observer must not call back into the
// engine's training methods.
class StepObserver {
 public:
  virtual ~StepObserver() = default;

  virtual void on_phase_begin(StepPhase) {}
  virtual void on_phase_end(StepPhase) {}
  // The model's hooks: before the strategy's acquire, after it succeeded,
  // and before the strategy's release.
  virtual void on_acquire(size_t /*layer*/, dscore_acquire_mode) {}
  virtual void on_acquired(size_t /*layer*/, dscore_acquire_mode) {}
  virtual void on_release(size_t /*layer*/) {}
  // step() completed an accumulation boundary: add monitor events (written
  // to the monitors after every observer has had its turn).
  virtual void on_boundary(const StepReport&, std::vector<ScalarEvent>* /*events*/) {}
  // After the monitors were written: the boundary is done.
  virtual void on_step_end(const StepReport&) {}
};

// Tells every observer that `phase` begins now and ends with the scope.
class PhaseScope {
 public:
  PhaseScope(const std::vector<StepObserver*>& observers, StepPhase phase)
      : observers_(observers), phase_(phase) {
    for (StepObserver* o : observers_) o->on_phase_begin(phase_);
  }
  ~PhaseScope() {
    for (StepObserver* o : observers_) o->on_phase_end(phase_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  const std::vector<StepObserver*>& observers_;
  StepPhase phase_;
};

}  // namespace dscore
