#include "core/engine/phase_timers.h"

#include <cstdio>

#include "core/base/logging.h"

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

void PhaseTimers::on_phase_begin(StepPhase phase) {
  if (phase == StepPhase::kForwardBackward) forward_backward_begin();
  if (phase == StepPhase::kFinishReductions) model_returned();
  if (phase == StepPhase::kStep) step_begin();
}

void PhaseTimers::on_phase_end(StepPhase phase) {
  if (phase == StepPhase::kFinishReductions) reductions_done();
  if (phase == StepPhase::kStep) {
    step_end();
    if (rank_ == 0) log_info(micro_log_line());  // DeepSpeed logs these every step()
  }
}

void PhaseTimers::on_boundary(const StepReport& report, std::vector<ScalarEvent>* events) {
  const Boundary b = boundary();
  for (const auto& e : b.events) events->push_back({e.tag, e.value_ms, report.global_samples});
  if (steps_per_print_ > 0 && report.global_steps % steps_per_print_ == 0 && rank_ == 0)
    log_info(b.log_line);
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
