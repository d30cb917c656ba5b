// The ZeRO-3 acquire trace: recorded once, then next uses and gathered
// elements between events are lookups; a changed order invalidates it.
#include <gtest/gtest.h>

#include "core/zero/acquire_trace.h"

namespace dscore::zero {
namespace {

constexpr dscore_acquire_mode kF = DSCORE_ACQUIRE_FORWARD;
constexpr dscore_acquire_mode kB = DSCORE_ACQUIRE_BACKWARD;

// Forward 0 1 2, backward 2 1 0; layers cost 10, 20, 30 elements.
AcquireTrace recorded() {
  AcquireTrace trace;
  const size_t layers[] = {0, 1, 2, 2, 1, 0};
  for (size_t i = 0; i < 6; ++i) trace.observe(i, layers[i], i < 3 ? kF : kB);
  trace.finish({10, 20, 30});
  return trace;
}

TEST(AcquireTrace, RecordsTheFirstPassThenIsValid) {
  AcquireTrace trace;
  EXPECT_TRUE(trace.recording());
  EXPECT_FALSE(trace.valid());
  trace = recorded();
  EXPECT_FALSE(trace.recording());
  EXPECT_TRUE(trace.valid());
  ASSERT_EQ(trace.size(), 6u);
  EXPECT_EQ(trace.event(3).layer, 2u);
  EXPECT_EQ(trace.event(3).mode, kB);
}

TEST(AcquireTrace, NextUseAndElementsBetween) {
  const AcquireTrace trace = recorded();
  EXPECT_EQ(trace.next_use(0), 5u);
  EXPECT_EQ(trace.next_use(2), 3u);
  EXPECT_EQ(trace.next_use(5), AcquireTrace::kNever);
  EXPECT_EQ(trace.elements_between(0, 3), 60);
  EXPECT_EQ(trace.elements_between(2, 4), 60);
  EXPECT_EQ(trace.elements_between(4, 6), 30);
  EXPECT_EQ(trace.elements_between(1, 1), 0);
}

TEST(AcquireTrace, FollowingTheOrderKeepsItValidAndAChangeInvalidatesIt) {
  AcquireTrace trace = recorded();
  trace.observe(0, 0, kF);
  trace.observe(1, 1, kF);
  EXPECT_TRUE(trace.valid());
  trace.observe(2, 2, kB);  // same layer, other mode
  EXPECT_FALSE(trace.valid());
  AcquireTrace longer = recorded();
  longer.observe(6, 0, kF);  // past the end
  EXPECT_FALSE(longer.valid());
  EXPECT_EQ(longer.size(), 6u);  // nothing more is recorded
}

}  // namespace
}  // namespace dscore::zero
