// The "nccl" comm plugin on a GPU, through the C ABI (plugin_host::
// CommInstance): the shared collective checks (tests/multirank/
// collective_checks.h) at world size 1 in this process and, with two or
// more GPUs visible, at one rank per GPU as threads of this process and
// as processes under mpirun; collectives are
// enqueued on the caller's stream and return before it runs; host tensors
// are refused naming the mpi backend; a missing peer is caught by the
// deadline; abort() fails every later call.
// Label `gpu`: skipped (GTEST_SKIP) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "core/comm/tcp_kv.h"
#include "tests/core/cli/process.h"
#include "tests/plugins/comm/nccl/device_comm.h"

namespace dscore::testing {
namespace {

using plugin_host::PluginRegistry;

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    auto registry = PluginRegistry::open({{DSCORE_BUILD_PLUGIN_DIR}, {true}, {"test"}});
    ASSERT_TRUE(registry.ok()) << registry.status().message();
    registry_ = *registry;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  std::unique_ptr<DeviceComm> one_rank(int64_t timeout_ms = 20000) {
    NcclJob job;
    job.timeout_ms = timeout_ms;
    auto instance = create_nccl(*registry_, job);
    EXPECT_TRUE(instance.ok()) << instance.status().message();
    if (!instance.ok()) return nullptr;
    return std::make_unique<DeviceComm>(std::move(*instance), 0, 1);
  }
  std::shared_ptr<PluginRegistry> registry_;
};

TEST_F(NcclTest, EveryCollectiveComputesTheExpectedValuesAtWorldSizeOne) {
  auto c = one_rank();
  ASSERT_NE(c, nullptr);
  CheckLog log(0);
  run_collective_checks(*c, CheckOptions{1e-6f}, &log);
  run_grouped_checks(*c, 1e-6f, &log);
  EXPECT_EQ(log.failures(), 0) << "of " << log.checks() << " checks (see stderr)";
  auto counters = c->wire_counters();
  ASSERT_TRUE(counters.ok());
  EXPECT_GT(counters->operations, 10u);
  EXPECT_EQ(counters->bytes_sent, 0u) << "nothing leaves a one-rank communicator";
}

// The collective is enqueued behind work the stream has not run yet, and
// returns before that work finished: no hidden synchronisation.
TEST_F(NcclTest, CollectivesAreEnqueuedOnTheCallersStreamAndReturnAtOnce) {
  auto c = one_rank();
  ASSERT_NE(c, nullptr);
  std::atomic<bool> returned{false}, ran_after_return{false};
  struct Gate {
    std::atomic<bool>* returned;
    std::atomic<bool>* ran_after_return;
  } gate{&returned, &ran_after_return};
  // A host function that holds the stream until the collective call
  // returned (at most 10 s, so a blocking plugin fails instead of hanging).
  auto hold = [](void* p) {
    auto* g = static_cast<Gate*>(p);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!g->returned->load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g->ran_after_return->store(g->returned->load());
  };
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 4 * sizeof(float)), cudaSuccess);
  const float host[4] = {1, 2, 3, 4};
  ASSERT_EQ(cudaMemcpy(buf, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  dscore_tensor t = cuda_view({buf, DSCORE_DTYPE_F32, 4}, 0);
  // A first collective outside the gate: NCCL's one-time setup may wait.
  ASSERT_TRUE(c->instance().allreduce(t, t, DSCORE_REDUCE_SUM, c->stream()).ok());
  ASSERT_EQ(cudaStreamSynchronize(c->stream()), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(c->stream(), hold, &gate), cudaSuccess);
  Status st = c->instance().allreduce(t, t, DSCORE_REDUCE_SUM, c->stream());
  returned = true;
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaStreamSynchronize(c->stream()), cudaSuccess);
  EXPECT_TRUE(ran_after_return) << "allreduce waited for its stream before returning";
  float back[4] = {};
  ASSERT_EQ(cudaMemcpy(back, buf, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[3], 4.0f);
  cudaFree(buf);
}

TEST_F(NcclTest, HostTensorsAreRefusedNamingTheCollectiveAndTheMpiBackend) {
  auto c = one_rank();
  ASSERT_NE(c, nullptr);
  float x[2] = {1, 2};
  dscore_tensor t = cuda_view({x, DSCORE_DTYPE_F32, 2}, 0);
  t.device_type = DSCORE_DEVICE_CPU;
  Status st = c->instance().allreduce(t, t, DSCORE_REDUCE_SUM, nullptr);
  EXPECT_EQ(st.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("allreduce"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("\"mpi\""), std::string::npos) << st.message();
  st = c->instance().broadcast(t, 0, nullptr);
  EXPECT_NE(st.message().find("broadcast"), std::string::npos) << st.message();
}

// A job of two ranks where rank 1 never comes: creation must end at the
// deadline with DEADLINE_EXCEEDED naming the rank, not hang.
TEST_F(NcclTest, AMissingPeerEndsCreationAtTheDeadline) {
  NcclJob job;
  job.world_size = 2;
  job.timeout_ms = 3000;
  const auto start = std::chrono::steady_clock::now();
  auto instance = create_nccl(*registry_, job);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(instance.ok());
  EXPECT_EQ(instance.status().code(), DSCORE_DEADLINE_EXCEEDED) << instance.status().message();
  EXPECT_NE(instance.status().message().find("rank 0 of 2"), std::string::npos)
      << instance.status().message();
  EXPECT_LT(seconds, 30.0);
}

TEST_F(NcclTest, AbortFailsEveryLaterCall) {
  auto c = one_rank();
  ASSERT_NE(c, nullptr);
  c->instance().abort("a test aborted it");
  Status st = c->barrier();
  EXPECT_EQ(st.code(), DSCORE_UNAVAILABLE);
  EXPECT_NE(st.message().find("a test aborted it"), std::string::npos) << st.message();
}

// One thread per GPU in this process, the ranks' engines sharing the host's
// in-process key-value store (how rank 0's unique id reaches the others).
TEST_F(NcclTest, EveryCollectiveComputesTheExpectedValuesWithRanksAsThreads) {
  const int world = std::min(cuda_device_count(), 4);
  if (world < 2) GTEST_SKIP() << "one GPU visible: ranks as threads need two or more";
  auto kv = plugin_host::make_in_process_kv();
  std::vector<int> failures(static_cast<size_t>(world), -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      if (cudaSetDevice(r) != cudaSuccess) return;
      NcclJob job;
      job.rank = r;
      job.world_size = world;
      job.local_rank = r;
      job.kv = kv;
      auto instance = create_nccl(*registry_, job);
      if (!instance.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, instance.status().message().c_str());
        return;
      }
      DeviceComm c(std::move(*instance), r, world);
      CheckLog log(r);
      run_collective_checks(c, CheckOptions{1e-6f}, &log);
      run_grouped_checks(c, 1e-6f, &log);
      failures[static_cast<size_t>(r)] = log.failures();
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(failures, std::vector<int>(static_cast<size_t>(world), 0)) << "-1: creation failed";
}

// Two ranks as threads on GPUs 0 and 1, `body(rank, comm)` on each once
// both are connected; false when creation failed.
bool two_ranks(const PluginRegistry& registry, int64_t timeout_ms,
               const std::function<void(int, DeviceComm&)>& body) {
  auto kv = plugin_host::make_in_process_kv();
  std::atomic<int> created{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      if (cudaSetDevice(r) != cudaSuccess) return;
      NcclJob job;
      job.rank = r;
      job.world_size = 2;
      job.local_rank = r;
      job.timeout_ms = timeout_ms;
      job.kv = kv;
      auto instance = create_nccl(registry, job);
      if (!instance.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, instance.status().message().c_str());
        return;
      }
      ++created;
      DeviceComm c(std::move(*instance), r, 2);
      body(r, c);
    });
  for (std::thread& t : ranks) t.join();
  return created == 2;
}

// A peer that aborts its communicator mid-job: the other rank's next
// collective ends with an error naming it and the op (NCCL's
// ncclRemoteError, or the deadline where NCCL cannot tell), not a hang.
TEST_F(NcclTest, APeerThatAbortsEndsTheOthersNextCollective) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU visible: two ranks need two";
  std::atomic<bool> left{false};
  Status after;
  double seconds = 0;
  ASSERT_TRUE(two_ranks(*registry_, 5000, [&](int rank, DeviceComm& c) {
    EXPECT_TRUE(c.barrier().ok()) << "rank " << rank;
    if (rank == 1) {
      c.instance().abort("the test stops rank 1");
      left = true;
      return;
    }
    while (!left) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto start = std::chrono::steady_clock::now();
    after = c.barrier();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }));
  ASSERT_FALSE(after.ok());
  EXPECT_TRUE(after.code() == DSCORE_UNAVAILABLE || after.code() == DSCORE_DEADLINE_EXCEEDED)
      << after.message();
  EXPECT_NE(after.message().find("barrier on rank 0 of 2"), std::string::npos) << after.message();
  if (after.message().find("NCCL emulation") != std::string::npos) {
    EXPECT_NE(after.message().find("rank 1 aborted its communicator"), std::string::npos)
        << after.message();
  }
  EXPECT_LT(seconds, 30.0);
}

// A peer that never comes to a collective: the waiting rank's call ends at
// comm.timeout_ms with DEADLINE_EXCEEDED, and its communicator is aborted.
TEST_F(NcclTest, APeerThatNeverArrivesEndsTheCollectiveAtTheDeadline) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU visible: two ranks need two";
  std::atomic<bool> ended{false};
  Status late, later;
  double seconds = 0;
  ASSERT_TRUE(two_ranks(*registry_, 2000, [&](int rank, DeviceComm& c) {
    EXPECT_TRUE(c.barrier().ok()) << "rank " << rank;
    if (rank == 1) {  // skips the second barrier
      while (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    late = c.barrier();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    later = c.barrier();
    ended = true;
  }));
  EXPECT_EQ(late.code(), DSCORE_DEADLINE_EXCEEDED) << late.message();
  EXPECT_NE(late.message().find("comm.timeout_ms"), std::string::npos) << late.message();
  EXPECT_GE(seconds, 1.9);
  EXPECT_LT(seconds, 30.0);
  EXPECT_EQ(later.code(), DSCORE_UNAVAILABLE)
      << "the communicator was aborted: " << later.message();
}

// mpirun with `ranks` processes of the worker (tests/plugins/comm/nccl/
// nccl_collectives_worker.cc) and its `mode`, the unique id passed through
// the job's TCP key-value store at MASTER_ADDR:MASTER_PORT.
ProcessResult run_workers(int ranks, const std::string& mode) {
  Result<int> port = comm::pick_free_port();
  if (!port.ok()) {
    ProcessResult failed;
    failed.err = port.status().message();
    return failed;
  }
  std::vector<std::string> argv = {MPIRUN,
                                   "-n",
                                   std::to_string(ranks),
                                   "--bind-to",
                                   "none",
                                   "-x",
                                   "MASTER_ADDR=127.0.0.1",
                                   "-x",
                                   "MASTER_PORT=" + std::to_string(*port)};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.push_back(NCCL_WORKER);
  if (!mode.empty()) argv.push_back(mode);
  ProcessOptions options;
  options.env = mpi_test_env();
  return run_process(argv, options);
}

// One process per GPU under mpirun.
TEST_F(NcclTest, EveryCollectiveComputesTheExpectedValuesUnderMpirun) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "one GPU visible: the multi-process run needs two or more";
  if (access(MPIRUN, X_OK) != 0) GTEST_SKIP() << MPIRUN << " is not on this machine";
  ProcessResult r = run_workers(std::min(gpus, 4), "");
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.rfind("OK ", 0), 0u) << r.describe();
}

// A rank's process dies between collectives: rank 0's next one ends with
// an error naming it and the op (or at the deadline), not a hang.
TEST_F(NcclTest, ADeadRankEndsTheOthersNextCollectiveUnderMpirun) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU visible: two ranks need two";
  if (access(MPIRUN, X_OK) != 0) GTEST_SKIP() << MPIRUN << " is not on this machine";
  ProcessResult r = run_workers(2, "--rank-1-dies");
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("ENDED"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("barrier on rank 0 of 2"), std::string::npos) << r.describe();
  // NCCL's last error names the peer where it knows it (the emulation does).
  if (r.out.find("NCCL emulation") != std::string::npos) {
    EXPECT_NE(r.out.find("rank 1's process"), std::string::npos) << r.describe();
  }
}

}  // namespace
}  // namespace dscore::testing
