// Two engines in one process at the same time, each with its own host
// context (communicator, memory ledger, error slots, key-value store): a
// 2-rank ZeRO-2 job (two engines on the loopback backend) and a 1-rank
// ZeRO-0 job with another model and optimizer run concurrently, and each
// produces exactly the losses and parameters it produces alone.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "tests/fakes/in_process_job.h"

namespace dscore {
namespace {

using testing::InProcessResult;
using testing::run_in_process_job;

const std::string kZero2 = R"("train_batch_size": 16, "train_steps": 8, "seed": 3,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
  "model": {"type": "mlp", "hidden_dim": 32, "n_hidden_layers": 2},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 500})";

const std::string kZero0 = R"("train_batch_size": 8, "train_steps": 8, "seed": 11,
  "optimizer": {"type": "sgd", "params": {"lr": 0.01, "momentum": 0.9}},
  "model": {"type": "mlp", "hidden_dim": 16, "n_hidden_layers": 1, "activation": "relu"},
  "zero_optimization": {"stage": 0})";

void expect_same(const InProcessResult& together, const InProcessResult& alone, const char* what) {
  ASSERT_EQ(together.error, "") << what;
  ASSERT_EQ(alone.error, "") << what;
  ASSERT_EQ(together.losses.size(), 8u) << what;
  EXPECT_EQ(together.losses, alone.losses) << what;
  EXPECT_EQ(together.params, alone.params) << what;
}

TEST(TwoEngines, RunAtOnceEachAsItRunsAlone) {
  const InProcessResult zero2_alone = run_in_process_job(kZero2, 2);
  const InProcessResult zero0_alone = run_in_process_job(kZero0, 1);
  InProcessResult zero2_together, zero0_together;
  std::thread a([&] { zero2_together = run_in_process_job(kZero2, 2); });
  std::thread b([&] { zero0_together = run_in_process_job(kZero0, 1); });
  a.join();
  b.join();
  expect_same(zero2_together, zero2_alone, "the ZeRO-2 job");
  expect_same(zero0_together, zero0_alone, "the ZeRO-0 job");
  EXPECT_NE(zero2_alone.losses, zero0_alone.losses);                 // two different jobs
  EXPECT_LT(zero2_alone.losses.back(), zero2_alone.losses.front());  // and they train
}

TEST(TwoEngines, AFailingRankEndsItsJobWithoutTouchingTheOther) {
  testing::InProcessHooks fail_rank1;
  fail_rank1.after_each_step = [](Engine& e, int64_t step) {
    return e.rank() == 1 && step == 2 ? internal_error("rank 1 fails on purpose") : Status::Ok();
  };
  InProcessResult failed, healthy;
  std::thread a([&] { failed = run_in_process_job(kZero2, 2, fail_rank1); });
  std::thread b([&] { healthy = run_in_process_job(kZero0, 1); });
  a.join();
  b.join();
  EXPECT_NE(failed.error, "");
  EXPECT_EQ(healthy.error, "");
  EXPECT_EQ(healthy.losses.size(), 8u);
}

// Two ranks as threads of one process, each with ZeRO-Offload, which logs
// "rank R: optimizer state ..." from inside its engine: each such line
// carries its own rank's prefix (the log rank is the engine's, not the
// process's), and each rank measures what it holds itself: its plan's model
// states, not both ranks' (the memory ledger is the engine's).
TEST(TwoEngines, EachRankLogsItsOwnRankAndMeasuresItsOwnMemory) {
  const std::string offload = R"("train_batch_size": 8, "train_steps": 2, "seed": 5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
    "model": {"type": "mlp", "hidden_dim": 32, "n_hidden_layers": 2},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}})";
  std::mutex mutex;
  std::map<int, zero::MemoryPlan> planned, measured;
  testing::InProcessHooks hooks;
  hooks.before_training = [&](Engine& e) {
    std::lock_guard<std::mutex> lock(mutex);
    planned[e.rank()] = e.plan().memory;
    measured[e.rank()] = e.measured_memory();
    return Status::Ok();
  };
  ::testing::internal::CaptureStderr();
  const InProcessResult result = run_in_process_job(offload, 2, hooks);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(result.error, "") << log;

  int lines = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    for (int rank : {0, 1}) {
      if (line.find("] rank " + std::to_string(rank) + ": optimizer state") == std::string::npos)
        continue;
      EXPECT_EQ(line.rfind("[dscore rank " + std::to_string(rank) + "]", 0), 0u) << line;
      ++lines;
    }
  }
  EXPECT_EQ(lines, 2) << log;

  for (int rank : {0, 1}) {
    const zero::MemoryPlan& p = planned[rank];
    const zero::MemoryPlan& m = measured[rank];
    EXPECT_GT(p.parameters, 0);
    EXPECT_EQ(m.parameters, p.parameters) << "rank " << rank;
    EXPECT_EQ(m.gradients, p.gradients) << "rank " << rank;
    EXPECT_EQ(m.master, p.master) << "rank " << rank;
    EXPECT_EQ(m.optimizer, p.optimizer) << "rank " << rank;
    EXPECT_EQ(m.offload_tiles, p.offload_tiles) << "rank " << rank;
  }
}

}  // namespace
}  // namespace dscore
