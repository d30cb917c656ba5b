// The ZeRO stages' equivalence invariant, in process: every rank a thread
// with its own engine on the loopback backend (tests/fakes/in_process_job.h),
// so the stage logic runs in milliseconds and without MPI. For the same seed
// and global batch, at one world size, stages 0-3 give the same bits with or
// without gradient accumulation (every stage reduces each micro-step's
// gradients when it accumulates across ranks: docs/zero.md#determinism);
// across world sizes the results agree within a stated tolerance. The same
// checks run on real processes under mpirun in
// tests/multirank/equivalence_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/fakes/in_process_job.h"

namespace dscore {
namespace {

using testing::InProcessResult;
using testing::run_in_process_job;

// Odd sizes on purpose: 7 -> 23 -> 23 -> 3 gives 797 parameters, which no
// world size 2-4 divides, and a 301-element bucket that splits layers.
// `batch`: the batch keys.
std::string config_with(int stage, const std::string& batch, const std::string& precision) {
  std::string c = batch + R"(, "train_steps": 6, "seed": 7, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 3}},
  "model": {"type": "mlp", "input_dim": 7, "hidden_dim": 23, "output_dim": 3, "n_hidden_layers": 2},
  "zero_optimization": {"stage": )" +
                  std::to_string(stage) +
                  R"(, "reduce_bucket_size": 301, "stage3_param_persistence_threshold": 20})";
  // DeepSpeed accumulates bf16 gradients in fp32 at stage 0 only; pin the
  // dtype so every stage does the same math (as the mpirun test does).
  if (precision == "bf16")
    c += R"(, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"})";
  return c;
}

// Micro-batches of 3, `gas` per step on each of `world` ranks.
std::string config(int stage, int world, int gas, const std::string& precision = "fp32") {
  return config_with(stage,
                     R"("train_micro_batch_size_per_gpu": 3, "train_batch_size": )" +
                         std::to_string(3 * world * gas) + R"(, "gradient_accumulation_steps": )" +
                         std::to_string(gas),
                     precision);
}

std::vector<InProcessResult> all_stages(int world, int gas, const std::string& precision = "fp32") {
  std::vector<InProcessResult> runs;
  for (int stage = 0; stage <= 3; ++stage) {
    runs.push_back(run_in_process_job(config(stage, world, gas, precision), world));
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

TEST(ZeroStagesInProcess, EveryStageGivesTheSameBitsAtEveryAccumulationCount) {
  for (int world : {1, 2, 3, 4})
    for (int gas : {1, 2, 3, 4}) {
      std::vector<InProcessResult> runs = all_stages(world, gas);
      for (int stage = 1; stage <= 3; ++stage)
        expect_bitwise(runs[static_cast<size_t>(stage)], runs[0],
                       "W=" + std::to_string(world) + " gas " + std::to_string(gas) + " stage " +
                           std::to_string(stage) + " vs 0");
    }
}

// Stage 3 reduce-scatters the pending layers' gradients once
// zero.reduce_flush_elements (or reduce_bucket_size) are pending: one
// reduce-scatter per layer gives the bits of one for the whole model, and
// of stage 0.
TEST(ZeroStagesInProcess, Stage3ReducesLayerByLayerWithTheBitsOfOneReduction) {
  auto one_bucket = [](int stage) {
    std::string c = config(stage, 2, 2);
    c.replace(c.find("\"reduce_bucket_size\": 301"), 25, "\"reduce_bucket_size\": 1e6");
    return c;
  };
  const InProcessResult zero0 = run_in_process_job(one_bucket(0), 2);
  const InProcessResult whole = run_in_process_job(one_bucket(3), 2);
  testing::InProcessHooks per_layer;
  per_layer.adjust_config = [](config::TrainingConfig& c) { c.zero.reduce_flush_elements = 1; };
  const InProcessResult layer_by_layer = run_in_process_job(one_bucket(3), 2, per_layer);
  for (const InProcessResult* r : {&zero0, &whole, &layer_by_layer}) {
    EXPECT_EQ(r->error, "");
    EXPECT_EQ(r->losses.size(), 6u);
  }
  expect_bitwise(layer_by_layer, whole, "stage 3, a reduce-scatter per layer vs one");
  expect_bitwise(layer_by_layer, zero0, "stage 3, a reduce-scatter per layer vs stage 0");
}

// Rank 0's calls of collective `op` in the fourth step of a 2-rank run of
// an mlp (input layer, two hidden-to-hidden layers of `hidden`, output
// layer; nothing persistent at stage 3), its config changed by `adjust`.
uint64_t calls_per_step(int stage, const std::string& op, int hidden,
                        const std::function<void(config::TrainingConfig&)>& adjust = {}) {
  const std::string c = R"("train_micro_batch_size_per_gpu": 2, "train_batch_size": 4,
    "train_steps": 4, "seed": 7, "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
    "model": {"type": "mlp", "input_dim": 7, "hidden_dim": )" +
                        std::to_string(hidden) + R"(, "output_dim": 3, "n_hidden_layers": 3},
    "zero_optimization": {"stage": )" +
                        std::to_string(stage) +
                        R"(, "stage3_param_persistence_threshold": 0}, "steps_per_print": 100)";
  std::vector<uint64_t> calls;  // after each step
  testing::InProcessHooks hooks;
  hooks.adjust_config = adjust;
  hooks.after_each_step = [&calls, &op](Engine& engine, int64_t) {
    if (engine.rank() == 0) calls.push_back(engine.communicator().counters()[op].calls);
    return Status::Ok();
  };
  const InProcessResult r = run_in_process_job(c, 2, hooks);
  EXPECT_EQ(r.error, "");
  return calls.size() < 4 ? uint64_t{0} : calls[3] - calls[2];
}

uint64_t stage3_calls_per_step(const std::string& op, int hidden,
                               const std::function<void(config::TrainingConfig&)>& adjust = {}) {
  return calls_per_step(3, op, hidden, adjust);
}

// Stages 0-2 reduce in buckets of reduce_bucket_size or
// reduce_flush_elements elements, whichever is fewer (gradient_reduction.h
// bucket_elements): DeepSpeed's default bucket (5e8) would hold a 100M
// model's whole gradients. The mlp's 9,027 elements (hidden 64): one
// reduction a step per owner (stages 1-2: a reduce to each of the 2 ranks)
// under the default bucket, more with buckets of 2,000 elements, and the
// same bits either way.
TEST(ZeroStagesInProcess, StagesBelow3ReduceInBucketsOfAtMostReduceFlushElements) {
  const auto small_buckets = [](config::TrainingConfig& c) { c.zero.reduce_flush_elements = 2000; };
  EXPECT_EQ(calls_per_step(0, "allreduce", 64), 1u);
  EXPECT_GE(calls_per_step(0, "allreduce", 64, small_buckets), 5u);
  for (int stage : {1, 2}) {
    EXPECT_EQ(calls_per_step(stage, "reduce", 64), 2u) << "stage " << stage;
    EXPECT_GE(calls_per_step(stage, "reduce", 64, small_buckets), 5u) << "stage " << stage;
  }
  for (int stage : {0, 2}) {
    testing::InProcessHooks small;
    small.adjust_config = [](config::TrainingConfig& c) { c.zero.reduce_flush_elements = 301; };
    std::string c = config(stage, 2, 2);
    c.replace(c.find("\"reduce_bucket_size\": 301"), 25, "\"reduce_bucket_size\": 1e6");
    const InProcessResult whole = run_in_process_job(c, 2);
    const InProcessResult capped = run_in_process_job(c, 2, small);
    EXPECT_EQ(whole.error, "");
    EXPECT_EQ(capped.error, "");
    expect_bitwise(capped, whole, "stage " + std::to_string(stage) + ", buckets of 301 vs one");
  }
}

// Stage 3 gathers a prefetch's layers in allgathers of whole layers, each
// closed once it holds 2^20 elements (sharded_zero.cc kAllgatherElements):
// layers that large get one each, small ones share. The input layer is
// gathered alone by the first acquire, the rest by the prefetch behind it;
// every layer stays gathered from its forward to its backward, so a step's
// allgathers are its forward's, plus one of the step statistics.
TEST(ZeroStagesInProcess, Stage3AllgathersWholeLayersClosedAt2To20Elements) {
  // Hidden layers of 1024 x 1024 + 1024 elements (past 2^20): one allgather
  // each, and one for the output layer after them. (One per prefetch
  // bucket: 3.)
  EXPECT_EQ(stage3_calls_per_step("allgather", 1024), 5u);
  // Hidden layers of 4160 elements: they and the output layer share one.
  // (One per layer: 5.)
  EXPECT_EQ(stage3_calls_per_step("allgather", 64), 3u);
}

// Stage 3 reduce-scatters once reduce_flush_elements are pending even when
// reduce_bucket_size (5e8 by default) is far larger. Backward reaches the
// output layer (195 elements), the hidden layers (4160 each), then the
// input layer (512): with 5000 the first flush comes after the first hidden
// layer, the second at the end; with the bucket alone, one at the end.
TEST(ZeroStagesInProcess, Stage3ReduceScattersOnceReduceFlushElementsArePending) {
  EXPECT_EQ(stage3_calls_per_step("reduce_scatter", 64), 1u);
  EXPECT_EQ(
      stage3_calls_per_step("reduce_scatter", 64,
                            [](config::TrainingConfig& c) { c.zero.reduce_flush_elements = 5000; }),
      2u);
}

TEST(ZeroStagesInProcess, Bf16StagesAgreeBitwise) {
  for (int gas : {1, 2}) {
    std::vector<InProcessResult> runs = all_stages(2, gas, "bf16");
    for (int stage = 1; stage <= 3; ++stage)
      expect_bitwise(runs[static_cast<size_t>(stage)], runs[0],
                     "bf16 W=2 gas " + std::to_string(gas) + " stage " + std::to_string(stage));
  }
}

TEST(ZeroStagesInProcess, WorldSizesAgreeWithinTolerance) {
  // The global batch is fixed (24): each world size splits it differently.
  const std::string batch = R"("train_batch_size": 24, "gradient_accumulation_steps": 1)";
  const InProcessResult one = run_in_process_job(config_with(0, batch, "fp32"), 1);
  ASSERT_EQ(one.error, "");
  for (int world : {2, 3})
    for (int stage : {1, 3}) {
      const InProcessResult r = run_in_process_job(config_with(stage, batch, "fp32"), world);
      ASSERT_EQ(r.error, "");
      expect_close(r, one,
                   "W=" + std::to_string(world) + " stage " + std::to_string(stage) + " vs W=1");
    }
}

}  // namespace
}  // namespace dscore
