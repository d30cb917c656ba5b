// The CPU device (core/device/cpu_device.h) on both stream modes: ordering
// through events, sticky failures, exceptions, draining on destruction,
// blocked time, copies and counted memory. On asynchronous streams a
// producer is made late by construction (its task blocks on a Gate the test
// opens), so a consumer that runs too early is caught deterministically; on
// synchronous streams every task has run when enqueue returns.
#include "core/device/cpu_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "tests/core/device/gate.h"

namespace dscore::device {
namespace {

using testing::Gate;
using namespace std::chrono_literals;

class CpuDeviceTest : public ::testing::TestWithParam<CpuStreams> {
 protected:
  bool async() const { return GetParam() == CpuStreams::kAsynchronous; }
  std::unique_ptr<Stream> stream(std::string name) {
    auto s = device_.create_stream(std::move(name));
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(s).value();
  }
  // A task that blocks on `gate` (asynchronous streams). A synchronous
  // stream runs it on the caller, so the gate opens first.
  Stream::Task late(Gate& gate, Stream::Task then) {
    if (!async()) gate.open();
    return [&gate, then = std::move(then)] {
      gate.pass();
      return then();
    };
  }

  CpuDevice device_{GetParam()};
};

TEST_P(CpuDeviceTest, DescribesItself) {
  EXPECT_EQ(device_.type(), DeviceType::kCpu);
  EXPECT_EQ(device_.tensor_device_type(), DSCORE_DEVICE_CPU);
  EXPECT_EQ(device_.describe(),
            async() ? "cpu (asynchronous streams)" : "cpu (synchronous streams)");
  auto s = stream("compute");
  EXPECT_EQ(s->name(), "compute");
  EXPECT_EQ(s->native(), nullptr);
}

TEST_P(CpuDeviceTest, WorkAfterWaitSeesTheOtherStreamsWrites) {
  auto producer = stream("producer");
  auto consumer = stream("consumer");
  Gate gate;
  int value = 0;
  int seen = -1;
  EventPtr written = producer->submit(late(gate, [&] {
    value = 42;
    return Status::Ok();
  }));
  consumer->wait(written);
  consumer->enqueue([&] {
    seen = value;
    return Status::Ok();
  });
  if (async()) {
    std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(consumer->record()->done()) << "the consumer ran before the producer's event";
    gate.open();
  }
  ASSERT_TRUE(consumer->synchronize().ok());
  EXPECT_EQ(seen, 42);
}

TEST_P(CpuDeviceTest, RecordWaitChainsAcrossThreeStreams) {
  auto a = stream("a");
  auto b = stream("b");
  auto c = stream("c");
  Gate gate;
  int x = 0, y = 0, z = 0;
  EventPtr a_done = a->submit(late(gate, [&] {
    x = 1;
    return Status::Ok();
  }));
  b->wait(a_done);
  EventPtr b_done = b->submit([&] {
    y = x + 1;
    return Status::Ok();
  });
  c->wait(b_done);
  c->enqueue([&] {
    z = y * 10;
    return Status::Ok();
  });
  if (async()) {
    std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(c->record()->done());
    gate.open();
  }
  ASSERT_TRUE(c->synchronize().ok());
  EXPECT_EQ(z, 20);
  // c waited on b, b on a: all three are done.
  EXPECT_TRUE(a_done->done());
  EXPECT_TRUE(b_done->done());
}

TEST_P(CpuDeviceTest, SynchronizeWaitsForEverythingEnqueued) {
  auto s = stream("s");
  int count = 0;  // touched only by the stream's tasks, in order
  for (int i = 0; i < 100; ++i)
    s->enqueue([&count, i] {
      if (i == 0) std::this_thread::sleep_for(5ms);
      ++count;
      return Status::Ok();
    });
  ASSERT_TRUE(s->synchronize().ok());
  EXPECT_EQ(count, 100);
  EXPECT_TRUE(s->record()->done());
  EXPECT_TRUE(s->record()->wait().ok());
}

TEST_P(CpuDeviceTest, AFailureIsStickyInsideTheStream) {
  auto s = stream("optimizer");
  bool ran_after = false;
  EventPtr before = s->submit([] { return Status::Ok(); });
  s->enqueue([] { return Status(DSCORE_UNAVAILABLE, "the disk went away"); });
  EventPtr after = s->submit([&] {
    ran_after = true;
    return Status::Ok();
  });
  Status st = s->synchronize();
  EXPECT_EQ(st.code(), DSCORE_UNAVAILABLE);
  EXPECT_EQ(st.message(), "the disk went away");
  EXPECT_FALSE(ran_after);
  EXPECT_TRUE(before->wait().ok()) << "an event recorded before the failure is OK";
  EXPECT_EQ(after->wait().code(), DSCORE_UNAVAILABLE);
  // Later work does not run either, and reports the same status.
  s->enqueue([&] {
    ran_after = true;
    return Status::Ok();
  });
  EXPECT_EQ(s->synchronize().message(), "the disk went away");
  EXPECT_FALSE(ran_after);
}

TEST_P(CpuDeviceTest, AFailureReachesAStreamThatWaitsOnItsEvent) {
  auto producer = stream("comm");
  auto consumer = stream("compute");
  Gate gate;
  bool consumer_ran = false;
  EventPtr failed = producer->submit(
      late(gate, [] { return Status(DSCORE_DEADLINE_EXCEEDED, "allreduce timed out"); }));
  consumer->wait(failed);
  consumer->enqueue([&] {
    consumer_ran = true;
    return Status::Ok();
  });
  gate.open();
  Status st = consumer->synchronize();
  EXPECT_EQ(st.code(), DSCORE_DEADLINE_EXCEEDED);
  EXPECT_EQ(st.message(), "allreduce timed out");
  EXPECT_FALSE(consumer_ran);
  // Waiting on an event that had already failed when wait() was called.
  auto late_consumer = stream("late");
  late_consumer->wait(failed);
  EXPECT_EQ(late_consumer->synchronize().code(), DSCORE_DEADLINE_EXCEEDED);
  // A null event orders nothing and fails nothing.
  auto other = stream("other");
  other->wait(nullptr);
  EXPECT_TRUE(other->synchronize().ok());
}

TEST_P(CpuDeviceTest, AThrowingTaskBecomesInternalNamingTheStream) {
  auto s = stream("gradient copy");
  s->enqueue([]() -> Status { throw std::runtime_error("index 7 out of range"); });
  Status st = s->synchronize();
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_NE(st.message().find("\"gradient copy\""), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("index 7 out of range"), std::string::npos) << st.message();

  auto t = stream("odd");
  t->enqueue([]() -> Status { throw 17; });
  st = t->synchronize();
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_NE(st.message().find("\"odd\""), std::string::npos) << st.message();
}

TEST_P(CpuDeviceTest, DestructionFinishesQueuedWork) {
  std::atomic<int> count{0};
  {
    auto s = stream("doomed");
    for (int i = 0; i < 50; ++i)
      s->enqueue([&count, i] {
        if (i == 0) std::this_thread::sleep_for(10ms);  // the rest is still queued
        count.fetch_add(1);
        return Status::Ok();
      });
  }
  EXPECT_EQ(count.load(), 50);
}

TEST_P(CpuDeviceTest, BlockedTimeCountsCallersThatWait) {
  // The slow producer is asynchronous in both modes: a synchronous stream
  // blocks when it waits on it.
  auto producer = make_cpu_stream("slow", CpuStreams::kAsynchronous);
  auto consumer = stream("consumer");
  EventPtr slow = producer->submit([] {
    std::this_thread::sleep_for(30ms);
    return Status::Ok();
  });
  consumer->wait(slow);
  ASSERT_TRUE(consumer->synchronize().ok());
  // Synchronous: the caller blocked in wait(). Asynchronous: the consumer's
  // worker waited, and the caller blocked in synchronize() behind it.
  EXPECT_GE(consumer->blocked_ns(), 20'000'000);
  // Event::wait counts on the stream that recorded the event.
  EventPtr slow2 = producer->submit([] {
    std::this_thread::sleep_for(30ms);
    return Status::Ok();
  });
  const int64_t before = producer->blocked_ns();
  ASSERT_TRUE(slow2->wait().ok());
  EXPECT_GE(producer->blocked_ns() - before, 20'000'000);
}

TEST_P(CpuDeviceTest, CopyAndFillZeroRunOnTheStream) {
  auto s = stream("copy");
  auto src = device_.allocate(256, Placement::kPinned, MemoryUse::kBuffers, "copy source");
  auto dst = device_.allocate(256, Placement::kDevice, MemoryUse::kBuffers, "copy target");
  ASSERT_TRUE(src.ok() && dst.ok());
  auto* in = static_cast<uint8_t*>(src->data());
  auto* out = static_cast<uint8_t*>(dst->data());
  Gate gate;
  s->enqueue(late(gate, [&] {
    for (int i = 0; i < 256; ++i) in[i] = static_cast<uint8_t>(i + 1);
    return Status::Ok();
  }));
  device_.copy(out, in, 256, *s);
  device_.fill_zero(out + 64, 32, *s);
  gate.open();
  ASSERT_TRUE(s->synchronize().ok());
  for (int i = 0; i < 256; ++i) {
    const int expect = (i >= 64 && i < 96) ? 0 : i + 1;
    ASSERT_EQ(out[i], static_cast<uint8_t>(expect)) << "byte " << i;
  }
}

TEST_P(CpuDeviceTest, AllocationsAreCountedUnderTheirUse) {
  const MemoryByUse before_use = memory_by_use();
  const uint64_t pinned_before = memory_usage(DSCORE_MEMORY_PINNED).current_bytes;
  const auto state = static_cast<size_t>(MemoryUse::kOptimizerState);
  {
    auto host = device_.allocate(4096, Placement::kHost, MemoryUse::kOptimizerState, "adam m");
    auto pinned = device_.allocate(1000, Placement::kPinned, MemoryUse::kOptimizerState, "adam v");
    ASSERT_TRUE(host.ok() && pinned.ok());
    EXPECT_EQ(host->bytes(), 4096u);
    EXPECT_EQ(pinned->placement(), Placement::kPinned);
    EXPECT_EQ(memory_by_use()[state] - before_use[state], 5096u);
    EXPECT_EQ(memory_by_tag()["adam m"], 4096u);
    EXPECT_EQ(memory_usage(DSCORE_MEMORY_PINNED).current_bytes - pinned_before, 1000u);
    const auto* bytes = static_cast<const uint8_t*>(host->data());
    for (int i = 0; i < 4096; ++i) ASSERT_EQ(bytes[i], 0) << "zero-filled by default";
    Buffer moved = std::move(host).value();
    EXPECT_EQ(memory_by_use()[state] - before_use[state], 5096u) << "a move is not a copy";
  }
  EXPECT_EQ(memory_by_use()[state], before_use[state]);
  EXPECT_EQ(memory_usage(DSCORE_MEMORY_PINNED).current_bytes, pinned_before);
}

TEST_P(CpuDeviceTest, AnAbsurdAllocationFailsNamingTheBuffer) {
  auto r = device_.allocate(SIZE_MAX - 4095, Placement::kHost, MemoryUse::kActivations,
                            "activation stash");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(r.status().message().find("activation stash"), std::string::npos)
      << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(Modes, CpuDeviceTest,
                         ::testing::Values(CpuStreams::kSynchronous, CpuStreams::kAsynchronous),
                         [](const auto& info) {
                           return info.param == CpuStreams::kSynchronous ? "Synchronous"
                                                                         : "Asynchronous";
                         });

// The point of the asynchronous mode: a consumer that forgets wait() reads
// the producer's data before it is written, as it would on a GPU. Made
// deterministic by holding the producer at a gate until the consumer is done.
TEST(CpuDeviceAsynchronous, AMissingWaitIsExposed) {
  CpuDevice device(CpuStreams::kAsynchronous);
  auto producer = std::move(device.create_stream("producer")).value();
  auto consumer = std::move(device.create_stream("consumer")).value();
  Gate gate;
  int value = 0;
  int seen = -1;
  producer->enqueue([&] {
    gate.pass();
    value = 42;
    return Status::Ok();
  });
  EventPtr written = producer->record();  // recorded, but the consumer forgets to wait on it
  consumer->enqueue([&] {
    seen = value;
    return Status::Ok();
  });
  ASSERT_TRUE(consumer->synchronize().ok());
  gate.open();
  ASSERT_TRUE(written->wait().ok());
  EXPECT_EQ(seen, 0) << "the consumer read before the producer wrote";
  EXPECT_EQ(value, 42);
}

// The same program on synchronous streams gives the "right" answer: the
// synchronous mode is the reference and hides a missing wait.
TEST(CpuDeviceSynchronous, TasksRunOnTheCallerAtOnce) {
  CpuDevice device(CpuStreams::kSynchronous);
  auto s = std::move(device.create_stream("inline")).value();
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  s->enqueue([&] {
    ran_on = std::this_thread::get_id();
    return Status::Ok();
  });
  EXPECT_EQ(ran_on, caller);
  EXPECT_TRUE(s->record()->done());
}

}  // namespace
}  // namespace dscore::device
