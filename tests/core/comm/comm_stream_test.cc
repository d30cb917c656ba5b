// The comm thread runs tasks in submission order, lets callers wait on one
// task or all, and makes the first failure sticky.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/comm/comm_stream.h"

namespace dscore::comm {
namespace {

TEST(CommStream, RunsInOrderOnItsOwnThread) {
  CommStream stream;
  std::vector<int> order;
  const auto main_id = std::this_thread::get_id();
  std::atomic<bool> other_thread{true};
  for (int i = 0; i < 50; ++i)
    stream.submit([&, i] {
      if (std::this_thread::get_id() == main_id) other_thread = false;
      order.push_back(i);
      return Status::Ok();
    });
  ASSERT_TRUE(stream.synchronize().ok());
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_TRUE(other_thread);
  EXPECT_TRUE(stream.idle());
}

TEST(CommStream, WaitReturnsThatTasksStatusAndOverlapsTheCaller) {
  CommStream stream;
  std::atomic<bool> release{false};
  auto slow = stream.submit([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status::Ok();
  });
  EXPECT_FALSE(stream.idle());  // still running while the caller goes on
  release = true;
  EXPECT_TRUE(stream.wait(slow).ok());
}

TEST(CommStream, FirstFailureIsStickyAndLaterTasksDoNotRun) {
  CommStream stream;
  bool ran_after = false;
  auto failing =
      stream.submit([] { return Status(DSCORE_DEADLINE_EXCEEDED, "allreduce #3 timed out"); });
  auto later = stream.submit([&] {
    ran_after = true;
    return Status::Ok();
  });
  EXPECT_EQ(stream.wait(failing).code(), DSCORE_DEADLINE_EXCEEDED);
  Status s = stream.wait(later);
  EXPECT_EQ(s.code(), DSCORE_DEADLINE_EXCEEDED);
  EXPECT_EQ(s.message(), "allreduce #3 timed out");
  EXPECT_FALSE(ran_after);
  EXPECT_EQ(stream.run([] { return Status::Ok(); }).code(), DSCORE_DEADLINE_EXCEEDED);
}

TEST(CommStream, AnExceptionInATaskBecomesAStatus) {
  CommStream stream;
  Status s = stream.run([]() -> Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.code(), DSCORE_INTERNAL);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace dscore::comm
