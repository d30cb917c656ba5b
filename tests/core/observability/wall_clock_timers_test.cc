// Tests of core/observability/wall_clock_timers: DeepSpeed's
// SynchronizedWallClockTimer semantics (deepspeed/utils/timer.py) on a fake
// clock — accumulation, elapsed() draining even without reset, a running
// timer read mid-interval, trimmed means, the "time (ms) | name: x.xx" log
// line, and the elapsed_time_ms_* monitor events (docs/deepspeed-reference.md#monitors).
#include "core/observability/wall_clock_timers.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace dscore::observability {
namespace {

class WallClockTimersTest : public ::testing::Test {
 protected:
  double now_ = 100.0;  // seconds
  WallClockTimers timers_{[this] { return now_; }};
};

TEST_F(WallClockTimersTest, IntervalsAccumulateUntilRead) {
  WallClockTimer& t = timers_("fwd");
  t.start();
  now_ += 0.010;
  t.stop();
  now_ += 5.0;  // not timed
  t.start();
  now_ += 0.0025;
  t.stop();
  EXPECT_NEAR(t.elapsed_ms(), 12.5, 1e-9);
  EXPECT_EQ(t.elapsed_ms(), 0.0);
}

TEST_F(WallClockTimersTest, ElapsedDrainsEvenWithoutReset) {
  // DeepSpeed's quirk: reset=false keeps only the records mean() uses.
  WallClockTimer& t = timers_("bwd");
  t.start();
  now_ += 0.004;
  t.stop();
  EXPECT_NEAR(t.elapsed_ms(false), 4.0, 1e-9);
  EXPECT_EQ(t.elapsed_ms(false), 0.0);
}

TEST_F(WallClockTimersTest, ReadingARunningTimerKeepsItRunning) {
  WallClockTimer& t = timers_("step");
  t.start();
  now_ += 0.005;
  EXPECT_NEAR(t.elapsed_ms(), 5.0, 1e-9);
  EXPECT_TRUE(t.running());
  now_ += 0.002;
  t.stop();
  EXPECT_NEAR(t.elapsed_ms(), 2.0, 1e-9);
}

TEST_F(WallClockTimersTest, MeanIsTheTrimmedMeanOfTheReadIntervals) {
  WallClockTimer& t = timers_("fwd_microstep");
  for (int ms : {1, 2, 3, 4, 5, 6, 7, 8, 9, 100}) {
    t.start();
    now_ += ms / 1000.0;
    t.stop();
  }
  EXPECT_NEAR(t.mean_ms(), 5.5, 1e-9);  // 1 and 100 trimmed: mean of 2..9
}

TEST_F(WallClockTimersTest, MisuseIsABrokenInvariant) {
  WallClockTimer& t = timers_("fwd");
  EXPECT_THROW(t.stop(), std::logic_error);
  t.start();
  EXPECT_THROW(t.start(), std::logic_error);
}

TEST_F(WallClockTimersTest, LogLineAsDeepSpeedPrintsIt) {
  timers_("fwd").start();
  now_ += 0.0123456;
  timers_("fwd").stop();
  timers_("bwd").start();
  now_ += 0.0205;
  timers_("bwd").stop();
  // Names never created are left out, in the order given otherwise.
  EXPECT_EQ(timers_.log_line({"fwd", "bwd_inner", "bwd"}), "time (ms) | fwd: 12.35 | bwd: 20.50");
  EXPECT_EQ(timers_.log_line({"fwd", "bwd"}), "time (ms) | fwd: 0.00 | bwd: 0.00");
  timers_("fwd").start();
  now_ += 0.010;
  timers_("fwd").stop();
  EXPECT_EQ(timers_.log_line({"fwd"}, /*normalizer=*/4.0), "time (ms) | fwd: 2.50");
  EXPECT_FALSE(timers_.has("bwd_inner"));
}

TEST_F(WallClockTimersTest, BreakdownEventsHaveDeepSpeedsTagsInOrder) {
  const std::vector<std::string> names = global_timer_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == kBackwardInnerGlobalTimer) continue;  // never run: reported as 0
    timers_(names[i]).start();
    now_ += 0.001 * static_cast<double>(i + 1);
    timers_(names[i]).stop();
  }
  std::vector<TimerEvent> events = wall_clock_breakdown_events(timers_);
  const char* tags[] = {
      "Train/Samples/elapsed_time_ms_forward", "Train/Samples/elapsed_time_ms_backward",
      "Train/Samples/elapsed_time_ms_backward_inner",
      "Train/Samples/elapsed_time_ms_backward_allreduce", "Train/Samples/elapsed_time_ms_step"};
  const double values[] = {1.0, 2.0, 0.0, 4.0, 5.0};
  ASSERT_EQ(events.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(events[i].tag, tags[i]);
    EXPECT_NEAR(events[i].value_ms, values[i], 1e-9) << tags[i];
  }
  // Read with reset=false, which still drains: a log line right after shows 0.
  EXPECT_EQ(timers_.log_line({"fwd"}), "time (ms) | fwd: 0.00");
}

TEST(TimerNames, AreEnginePysInItsOrder) {
  EXPECT_EQ(micro_timer_names(),
            (std::vector<std::string>{"fwd_microstep", "bwd_microstep", "bwd_inner_microstep",
                                      "bwd_allreduce_microstep", "step_microstep"}));
  EXPECT_EQ(global_timer_names(),
            (std::vector<std::string>{"fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"}));
}

}  // namespace
}  // namespace dscore::observability
