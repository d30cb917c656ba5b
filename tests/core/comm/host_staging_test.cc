// Host buffers through device memory (core/comm/host_staging.h): with a
// HostStaging installed, the communicator hands the backend staged copies of
// host buffers, copies results back, and leaves device buffers alone. Two
// loopback ranks as threads; the "device memory" is host memory typed as
// pinned (DSCORE_DEVICE_CUDA_HOST, which the loopback backend moves), so the
// test sees every allocation and copy the staging makes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"
#include "core/plugin_host/host_context.h"

namespace dscore::comm {
namespace {

struct Counts {
  std::atomic<int> allocations{0}, copies{0}, waits{0};
};

HostStaging fake_staging(Counts* counts) {
  HostStaging staging;
  staging.device_type = DSCORE_DEVICE_CUDA_HOST;
  staging.allocate = [counts](size_t bytes) -> Result<std::shared_ptr<void>> {
    counts->allocations += 1;
    std::shared_ptr<char[]> memory(new char[bytes == 0 ? 1 : bytes]);
    std::memset(memory.get(), 0x7f, bytes);  // not the data: a missed copy shows
    return std::shared_ptr<void>(memory, memory.get());
  };
  staging.copy = [counts](void* dst, const void* src, size_t bytes) {
    counts->copies += 1;
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  };
  staging.wait = [counts] {
    counts->waits += 1;
    return Status::Ok();
  };
  return staging;
}

// fn(communicator, rank) on two loopback ranks, each with its staging.
void on_two_ranks(const std::function<void(Communicator&, int, Counts&)>& fn) {
  plugin_host::SearchPath path;
  path.add(DSCORE_BUILD_PLUGIN_DIR, true, "test");
  auto plugins = plugin_host::PluginRegistry::open(path);
  ASSERT_TRUE(plugins.ok()) << plugins.status().message();
  auto store = plugin_host::make_in_process_kv();
  config::CommConfig config;
  config.backend = "loopback";
  config.timeout_ms = 20000;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      JobEnv env;
      env.rank = r;
      env.world_size = 2;
      auto host = std::make_shared<plugin_host::HostContext>(store);
      auto comm = Communicator::create(**plugins, config, env, 42, host);
      ASSERT_TRUE(comm.ok()) << comm.status().message();
      Counts counts;
      (*comm)->stage_host_buffers(fake_staging(&counts));
      fn(**comm, r, counts);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(HostStaging, AnInPlaceAllreduceIsStagedOnceAndCopiedBack) {
  on_two_ranks([](Communicator& comm, int rank, Counts& counts) {
    std::vector<float> values = {1.0f + rank, 10.0f * (rank + 1)};
    const CommBuffer buffer{values.data(), DSCORE_DTYPE_F32, 2};
    ASSERT_TRUE(comm.allreduce(buffer, buffer, DSCORE_REDUCE_SUM).ok());
    EXPECT_EQ(values, (std::vector<float>{3.0f, 30.0f}));
    EXPECT_EQ(counts.allocations, 1);
    EXPECT_EQ(counts.copies, 2);  // in, and the result out
  });
}

TEST(HostStaging, AGatherIntoHostMemoryStagesBothBuffers) {
  on_two_ranks([](Communicator& comm, int rank, Counts& counts) {
    std::vector<int32_t> mine = {rank, rank + 100}, all(4, -1);
    ASSERT_TRUE(
        comm.allgather({mine.data(), DSCORE_DTYPE_I32, 2}, {all.data(), DSCORE_DTYPE_I32, 4}).ok());
    EXPECT_EQ(all, (std::vector<int32_t>{0, 100, 1, 101}));
    EXPECT_EQ(counts.allocations, 2);
    EXPECT_EQ(counts.copies, 2);
    EXPECT_EQ(counts.waits, 0);  // the copy back waited
  });
}

TEST(HostStaging, ABroadcastReachesTheHostBufferOfEveryRank) {
  on_two_ranks([](Communicator& comm, int rank, Counts&) {
    std::vector<int64_t> job = {rank == 0 ? 7 : 0, rank == 0 ? 9 : 0};
    ASSERT_TRUE(comm.broadcast({job.data(), DSCORE_DTYPE_I64, 2}, 0).ok());
    EXPECT_EQ(job, (std::vector<int64_t>{7, 9}));
  });
}

TEST(HostStaging, DeviceBuffersAreNotStagedAndAStagedSendIsWaitedFor) {
  on_two_ranks([](Communicator& comm, int rank, Counts& counts) {
    std::vector<float> mine = {static_cast<float>(rank)}, all(2, -1.0f);
    const CommBuffer device_recv{all.data(), DSCORE_DTYPE_F32, 2, DSCORE_DEVICE_CUDA_HOST};
    ASSERT_TRUE(
        comm.allgather({mine.data(), DSCORE_DTYPE_F32, 1, DSCORE_DEVICE_CUDA_HOST}, device_recv)
            .ok());
    EXPECT_EQ(counts.allocations, 0);
    ASSERT_TRUE(comm.allgather({mine.data(), DSCORE_DTYPE_F32, 1}, device_recv).ok());
    EXPECT_EQ(all, (std::vector<float>{0.0f, 1.0f}));
    EXPECT_EQ(counts.allocations, 1);
    EXPECT_EQ(counts.copies, 1);
    EXPECT_EQ(counts.waits, 1);  // the staged send lives until the gather is done
  });
}

TEST(HostStaging, AHostBufferInsideAGroupIsRefusedByName) {
  on_two_ranks([](Communicator& comm, int, Counts& counts) {
    std::vector<float> values = {1.0f};
    Status inner;
    const Status group = comm.grouped([&] {
      inner = comm.allreduce({values.data(), DSCORE_DTYPE_F32, 1},
                             {values.data(), DSCORE_DTYPE_F32, 1}, DSCORE_REDUCE_SUM);
      return Status::Ok();
    });
    EXPECT_FALSE(group.ok());
    EXPECT_NE(group.message().find("moves device memory only"), std::string::npos)
        << group.message();
    EXPECT_EQ(counts.allocations, 0);
  });
}

}  // namespace
}  // namespace dscore::comm
