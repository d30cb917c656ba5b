#include "core/engine/phase_timers.h"

#include <cstdio>

namespace dscore {

namespace o = observability;

void PhaseTimers::start(const char* micro, const char* global) {
  timers_(micro).start();
  timers_(global).start();
}

void PhaseTimers::stop(const char* micro, const char* global) {
  timers_(micro).stop();
  timers_(global).stop();
}

void PhaseTimers::forward_backward_begin() {
  start(o::kForwardMicroTimer, o::kForwardGlobalTimer);
  in_forward_ = true;
  in_backward_ = false;
}

void PhaseTimers::backward_begin() {
  if (!in_forward_) return;
  stop(o::kForwardMicroTimer, o::kForwardGlobalTimer);
  in_forward_ = false;
  start(o::kBackwardMicroTimer, o::kBackwardGlobalTimer);
  start(o::kBackwardInnerMicroTimer, o::kBackwardInnerGlobalTimer);
  in_backward_ = true;
}

void PhaseTimers::model_returned() {
  if (in_forward_) backward_begin();  // a model with no BACKWARD acquire: all of it was forward
  stop(o::kBackwardInnerMicroTimer, o::kBackwardInnerGlobalTimer);
  start(o::kBackwardReduceMicroTimer, o::kBackwardReduceGlobalTimer);
}

void PhaseTimers::reductions_done() {
  if (!in_backward_) return;
  stop(o::kBackwardReduceMicroTimer, o::kBackwardReduceGlobalTimer);
  stop(o::kBackwardMicroTimer, o::kBackwardGlobalTimer);
  in_backward_ = false;
}

void PhaseTimers::step_begin() { start(o::kStepMicroTimer, o::kStepGlobalTimer); }
void PhaseTimers::step_end() { stop(o::kStepMicroTimer, o::kStepGlobalTimer); }

std::string PhaseTimers::micro_log_line() { return timers_.log_line(o::micro_timer_names()); }
PhaseTimers::Boundary PhaseTimers::boundary() {
  Boundary b;
  b.events = o::wall_clock_breakdown_events(timers_);
  // The events come in DeepSpeed's global-timer order: fwd, bwd, bwd_inner,
  // bwd_allreduce, step.
  const std::vector<std::string> names = o::global_timer_names();
  b.log_line = "time (ms)";
  for (size_t i = 0; i < b.events.size() && i < names.size(); ++i) {
    char value[32];
    std::snprintf(value, sizeof value, "%.2f", b.events[i].value_ms);
    b.log_line += " | " + names[i] + ": " + value;
  }
  return b;
}

}  // namespace dscore
