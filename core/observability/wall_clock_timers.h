// DeepSpeed's wall_clock_breakdown timers (deepspeed/utils/timer.py
// SynchronizedWallClockTimer with host timing; engine.py's timer names and
// monitor events, docs/deepspeed-reference.md#monitors). The engine starts/stops the named
// timers around forward, backward (inner and allreduce parts) and step —
// after synchronising the device, which is what makes host timing honest —
// and asks for the log line and the monitor events at the boundary.
//
// DeepSpeed's quirk, kept: elapsed() always drains the intervals measured
// since the last read, even with reset=false (reset only also forgets the
// records mean() uses). Reading the global timers for the monitor events and
// then logging them in the same step therefore logs 0.00 for them, exactly
// as DeepSpeed does; read each timer once per boundary.
//
// Thread-safety: none; one engine thread.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dscore::observability {

// engine.py's timer names.
inline constexpr const char kForwardMicroTimer[] = "fwd_microstep";
inline constexpr const char kForwardGlobalTimer[] = "fwd";
inline constexpr const char kBackwardMicroTimer[] = "bwd_microstep";
inline constexpr const char kBackwardGlobalTimer[] = "bwd";
inline constexpr const char kBackwardInnerMicroTimer[] = "bwd_inner_microstep";
inline constexpr const char kBackwardInnerGlobalTimer[] = "bwd_inner";
inline constexpr const char kBackwardReduceMicroTimer[] = "bwd_allreduce_microstep";
inline constexpr const char kBackwardReduceGlobalTimer[] = "bwd_allreduce";
inline constexpr const char kStepMicroTimer[] = "step_microstep";
inline constexpr const char kStepGlobalTimer[] = "step";

// The order DeepSpeed logs them in (EngineTimers.micro_timers/global_timers).
std::vector<std::string> micro_timer_names();
std::vector<std::string> global_timer_names();

class WallClockTimer {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  explicit WallClockTimer(Clock clock) : clock_(std::move(clock)) {}

  // start() on a running timer (or stop() on a stopped one) is a broken
  // invariant (DeepSpeed asserts): DSCORE_CHECK throws.
  void start();
  void stop();
  bool running() const { return running_; }

  // Milliseconds measured since the last elapsed() (a running timer is
  // stopped, read, and restarted). Drains the pending intervals; `reset`
  // also clears the records mean() averages.
  double elapsed_ms(bool reset = true);
  // 10% trimmed mean of the intervals read by the last elapsed(), in ms.
  double mean_ms();
  void reset();

 private:
  Clock clock_;
  bool running_ = false;
  double start_ = 0;
  std::vector<double> pending_s_;   // intervals not yet read, seconds
  std::vector<double> records_ms_;  // intervals of the last read, ms
};

class WallClockTimers {
 public:
  // Default clock: std::chrono::steady_clock.
  WallClockTimers();
  explicit WallClockTimers(WallClockTimer::Clock clock) : clock_(std::move(clock)) {}

  // The timer `name`, created on first use.
  WallClockTimer& operator()(const std::string& name);
  bool has(const std::string& name) const { return timers_.count(name) != 0; }

  // SynchronizedWallClockTimer.log's text (log_dist prints it on rank 0 with
  // a "[Rank 0] " prefix): "time (ms) | fwd: 12.34 | bwd: 5.67 | ...";
  // timers never started are left out.
  std::string log_line(const std::vector<std::string>& names, double normalizer = 1.0,
                       bool reset = true);

 private:
  WallClockTimer::Clock clock_;
  std::map<std::string, WallClockTimer> timers_;
};

// The monitor events DeepSpeed writes at each accumulation boundary with
// wall_clock_breakdown (or the flops profiler) on, at x = global_samples:
// Train/Samples/elapsed_time_ms_{forward,backward,backward_inner,
// backward_allreduce,step}, each the global timer's elapsed(reset=false).
struct TimerEvent {
  std::string tag;
  double value_ms = 0;
};
std::vector<TimerEvent> wall_clock_breakdown_events(WallClockTimers& timers);

}  // namespace dscore::observability
