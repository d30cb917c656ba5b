// wall_clock_breakdown for the engine: DeepSpeed's timer names and log lines
// (core/observability/wall_clock_timers.h) driven from the phases dscore
// sees. forward_backward() is one model call, so forward ends, and backward
// begins, at the model's first BACKWARD acquire; backward's inner part ends
// when the model returns, and its reduction part when the last reduction of
// the micro-step has finished. step() is the step timer. A step observer:
// rank 0 logs DeepSpeed's lines, every rank adds the timers to the
// boundary's monitor events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/step_observer.h"
#include "core/observability/wall_clock_timers.h"

namespace dscore {

class PhaseTimers final : public StepObserver {
 public:
  PhaseTimers(int rank, int64_t steps_per_print) : rank_(rank), steps_per_print_(steps_per_print) {}

  void on_phase_begin(StepPhase phase) override;
  void on_phase_end(StepPhase phase) override;
  void on_acquire(size_t, dscore_acquire_mode mode) override {
    if (mode == DSCORE_ACQUIRE_BACKWARD) backward_begin();
  }
  void on_boundary(const StepReport& report, std::vector<ScalarEvent>* events) override;

  void forward_backward_begin();
  void backward_begin();   // the first BACKWARD acquire of the call (idempotent)
  void model_returned();   // backward inner part done; reductions start
  void reductions_done();  // forward_backward about to return
  void step_begin();
  void step_end();

  // DeepSpeed's per-micro-step log line ("time (ms) | fwd_microstep: ...").
  std::string micro_log_line();
  // The global timers at the boundary, read once: the
  // Train/Samples/elapsed_time_ms_* monitor values and DeepSpeed's log line
  // ("time (ms) | fwd: ... | step: ...") with the same numbers. (DeepSpeed
  // reads them twice, so with a monitor on its line shows 0.00.)
  struct Boundary {
    std::vector<observability::TimerEvent> events;
    std::string log_line;
  };
  Boundary boundary();

 private:
  void start(const char* micro, const char* global);
  void stop(const char* micro, const char* global);
  observability::WallClockTimers timers_;
  bool in_forward_ = false, in_backward_ = false;
  int rank_;
  int64_t steps_per_print_;
};

}  // namespace dscore
