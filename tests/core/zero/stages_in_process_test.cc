// The ZeRO stages' equivalence invariant, in process: every rank a thread
// with its own engine on the loopback backend (tests/fakes/in_process_job.h),
// so the stage logic runs in milliseconds and without MPI. For the same seed
// and global batch: at one world size with one micro-batch per step, stages
// 0-3 give the same bits; with gradient accumulation stages 0/1 (accumulate,
// then reduce) agree bitwise, and so do 2/3 (reduce every micro-step); across
// world sizes the results agree within a stated tolerance. The same checks
// run on real processes under mpirun in tests/multirank/equivalence_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/fakes/in_process_job.h"

namespace dscore {
namespace {

using testing::InProcessResult;
using testing::run_in_process_job;

std::string config(int stage, int gas, const std::string& precision = "fp32") {
  std::string c = R"("train_batch_size": 24, "gradient_accumulation_steps": )" +
                  std::to_string(gas) +
                  R"(, "train_steps": 6, "seed": 7, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 3}},
  "model": {"type": "mlp", "hidden_dim": 24, "n_hidden_layers": 2},
  "zero_optimization": {"stage": )" +
                  std::to_string(stage) +
                  R"(, "reduce_bucket_size": 300, "stage3_param_persistence_threshold": 20})";
  // DeepSpeed accumulates bf16 gradients in fp32 at stage 0 only; pin the
  // dtype so every stage does the same math (as the mpirun test does).
  if (precision == "bf16")
    c += R"(, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"})";
  return c;
}

std::vector<InProcessResult> all_stages(int world, int gas, const std::string& precision = "fp32") {
  std::vector<InProcessResult> runs;
  for (int stage = 0; stage <= 3; ++stage) {
    runs.push_back(run_in_process_job(config(stage, gas, precision), world));
    EXPECT_EQ(runs.back().error, "") << "stage " << stage << " W=" << world << " gas " << gas;
    EXPECT_EQ(runs.back().losses.size(), 6u);
  }
  return runs;
}

void expect_bitwise(const InProcessResult& a, const InProcessResult& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  EXPECT_EQ(a.params, b.params) << what;
}

// Relative 1e-4 with a 1e-6 floor: different reduction orders, same math.
void expect_close(const InProcessResult& a, const InProcessResult& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-4 * std::fabs(b.losses[i]) + 1e-6)
        << what << " step " << i;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_NEAR(a.params[i], b.params[i], 1e-4 * std::fabs(b.params[i]) + 1e-6)
        << what << " param " << i;
}

TEST(ZeroStagesInProcess, EveryStageGivesTheSameBitsAtOneMicroBatchPerStep) {
  for (int world : {1, 2, 3}) {
    std::vector<InProcessResult> runs = all_stages(world, 1);
    for (int stage = 1; stage <= 3; ++stage)
      expect_bitwise(runs[static_cast<size_t>(stage)], runs[0],
                     "W=" + std::to_string(world) + " stage " + std::to_string(stage) + " vs 0");
  }
}

TEST(ZeroStagesInProcess, Bf16StagesAgreeBitwise) {
  std::vector<InProcessResult> runs = all_stages(2, 1, "bf16");
  for (int stage = 1; stage <= 3; ++stage)
    expect_bitwise(runs[static_cast<size_t>(stage)], runs[0],
                   "bf16 W=2 stage " + std::to_string(stage));
}

TEST(ZeroStagesInProcess, WithAccumulationStagesPairUpByWhenTheyReduce) {
  std::vector<InProcessResult> runs = all_stages(2, 2);
  expect_bitwise(runs[1], runs[0], "gas 2: stage 1 vs 0 (accumulate, then reduce)");
  expect_bitwise(runs[3], runs[2], "gas 2: stage 3 vs 2 (reduce every micro-step)");
  expect_close(runs[2], runs[0], "gas 2: stage 2 vs 0");
  std::vector<InProcessResult> one_rank = all_stages(1, 2);
  for (int stage = 1; stage <= 3; ++stage)
    expect_bitwise(one_rank[static_cast<size_t>(stage)], one_rank[0],
                   "W=1 gas 2 stage " + std::to_string(stage) + " vs 0");
}

TEST(ZeroStagesInProcess, WorldSizesAgreeWithinTolerance) {
  const InProcessResult one = run_in_process_job(config(0, 1), 1);
  ASSERT_EQ(one.error, "");
  for (int world : {2, 3})
    for (int stage : {1, 3}) {
      const InProcessResult r = run_in_process_job(config(stage, 1), world);
      ASSERT_EQ(r.error, "");
      expect_close(r, one,
                   "W=" + std::to_string(world) + " stage " + std::to_string(stage) + " vs W=1");
    }
}

}  // namespace
}  // namespace dscore
