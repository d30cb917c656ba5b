#include "core/observability/wall_clock_timers.h"

#include <chrono>

#include "core/base/status.h"
#include "core/observability/ds_format.h"

namespace dscore::observability {

std::vector<std::string> micro_timer_names() {
  return {kForwardMicroTimer, kBackwardMicroTimer, kBackwardInnerMicroTimer,
          kBackwardReduceMicroTimer, kStepMicroTimer};
}

std::vector<std::string> global_timer_names() {
  return {kForwardGlobalTimer, kBackwardGlobalTimer, kBackwardInnerGlobalTimer,
          kBackwardReduceGlobalTimer, kStepGlobalTimer};
}

void WallClockTimer::start() {
  DSCORE_CHECK(!running_, "timer has already been started");
  start_ = clock_();
  running_ = true;
}

void WallClockTimer::stop() {
  DSCORE_CHECK(running_, "timer is not started");
  pending_s_.push_back(clock_() - start_);
  running_ = false;
}

double WallClockTimer::elapsed_ms(bool reset) {
  const bool was_running = running_;
  if (was_running) stop();
  records_ms_.clear();
  double total = 0;
  for (double s : pending_s_) {
    records_ms_.push_back(s * 1000.0);
    total += s * 1000.0;
  }
  pending_s_.clear();
  if (reset) this->reset();
  if (was_running) start();
  return total;
}

double WallClockTimer::mean_ms() {
  elapsed_ms(false);
  return trim_mean(records_ms_, 0.1);
}

void WallClockTimer::reset() {
  running_ = false;
  pending_s_.clear();
  records_ms_.clear();
}

WallClockTimers::WallClockTimers()
    : clock_([] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      }) {}

WallClockTimer& WallClockTimers::operator()(const std::string& name) {
  auto it = timers_.find(name);
  if (it == timers_.end()) it = timers_.emplace(name, WallClockTimer(clock_)).first;
  return it->second;
}

std::string WallClockTimers::log_line(const std::vector<std::string>& names, double normalizer,
                                      bool reset) {
  DSCORE_CHECK(normalizer > 0.0, "normalizer must be > 0");
  std::string out = "time (ms)";
  for (const std::string& name : names) {
    auto it = timers_.find(name);
    if (it == timers_.end()) continue;
    out += " | " + name + ": " + format_fixed(it->second.elapsed_ms(reset) / normalizer, 2);
  }
  return out;
}

std::vector<TimerEvent> wall_clock_breakdown_events(WallClockTimers& timers) {
  const std::pair<const char*, const char*> kTags[] = {
      {"Train/Samples/elapsed_time_ms_forward", kForwardGlobalTimer},
      {"Train/Samples/elapsed_time_ms_backward", kBackwardGlobalTimer},
      {"Train/Samples/elapsed_time_ms_backward_inner", kBackwardInnerGlobalTimer},
      {"Train/Samples/elapsed_time_ms_backward_allreduce", kBackwardReduceGlobalTimer},
      {"Train/Samples/elapsed_time_ms_step", kStepGlobalTimer},
  };
  std::vector<TimerEvent> events;
  for (const auto& [tag, timer] : kTags) events.push_back({tag, timers(timer).elapsed_ms(false)});
  return events;
}

}  // namespace dscore::observability
