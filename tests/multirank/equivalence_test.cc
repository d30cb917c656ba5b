// The ZeRO equivalence invariant (issue 3, docs/architecture.md#zero-strategies), with real
// processes under mpirun: for the same seed and global batch, stages 0-3
// give the same loss at every step and the same final parameters.
//  - Bitwise at one world size, with or without gradient accumulation (every
//    reduction sums in rank order; with accumulation across ranks every stage
//    reduces each micro-step, then sums the means; the norm's compensated
//    partial sums do not depend on the partitioning).
//  - Within stated tolerances across world sizes (the per-rank means are
//    summed in another grouping): relative 1e-5 on losses and 1e-4 on
//    parameters (floor 1e-3).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

RunResult run_ok(const RunSpec& spec) {
  RunResult r = run_workers(spec);
  EXPECT_TRUE(r.ok()) << "stage " << spec.stage << " W=" << spec.world << " " << spec.precision
                      << "\n"
                      << r.process.describe();
  EXPECT_EQ(r.ranks.size(), static_cast<size_t>(spec.world));
  EXPECT_EQ(r.ranks.empty() ? 0u : r.ranks[0].losses.size(), static_cast<size_t>(spec.steps));
  return r;
}

void expect_bitwise(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_FALSE(a.ranks.empty());
  ASSERT_FALSE(b.ranks.empty());
  EXPECT_EQ(a.ranks[0].losses, b.ranks[0].losses) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  EXPECT_TRUE(a.params == b.params) << what << ": parameters differ (max rel "
                                    << max_relative_difference(a.params, b.params) << ")";
}

void expect_close(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_FALSE(a.ranks.empty());
  ASSERT_FALSE(b.ranks.empty());
  EXPECT_LT(max_relative_difference(a.ranks[0].losses, b.ranks[0].losses), 1e-5) << what;
  EXPECT_LT(max_relative_difference(a.params, b.params, 1e-3), 1e-4) << what;
}

class EveryStage : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(EveryStage, StagesAreBitwiseEqualAtOneWorldSizeWithClippingActive) {
  const auto [world, precision] = GetParam();
  RunSpec spec;
  spec.world = world;
  spec.precision = precision;
  spec.clipping = 0.05;  // below the gradient norm of this model: clipping acts every step
  // DeepSpeed accumulates bf16 gradients in fp32 at stage 0 only
  // (docs/deepspeed-reference.md#derived-settings); pin the dtype so every stage does the same
  // math.
  if (precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  std::vector<RunResult> runs;
  for (int stage = 0; stage <= 3; ++stage) {
    spec.stage = stage;
    runs.push_back(run_ok(spec));
  }
  for (int stage = 1; stage <= 3; ++stage)
    expect_bitwise(
        runs[static_cast<size_t>(stage)], runs[0],
        "stage " + std::to_string(stage) + " vs 0, W=" + std::to_string(world) + " " + precision);
  // Clipping really acted: every step's gradient norm was above the limit.
  for (double norm : runs[0].ranks[0].grad_norms) EXPECT_GT(norm, spec.clipping);
}

INSTANTIATE_TEST_SUITE_P(Zero, EveryStage,
                         ::testing::Values(std::make_tuple(2, std::string("fp32")),
                                           std::make_tuple(4, std::string("fp32")),
                                           std::make_tuple(2, std::string("bf16")),
                                           std::make_tuple(2, std::string("fp16"))),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

TEST(ZeroEquivalence, StagesAgreeBitwiseWithGradientAccumulation) {
  for (const auto& [world, gas] : {std::pair{2, 2}, std::pair{3, 3}}) {
    RunSpec spec;
    spec.world = world;
    spec.gas = gas;
    spec.train_batch = 4 * world * gas;
    spec.overlap_comm = world == 3;  // both ways of submitting the buckets
    std::vector<RunResult> runs;
    for (int stage = 0; stage <= 3; ++stage) {
      spec.stage = stage;
      runs.push_back(run_ok(spec));
    }
    for (int stage = 1; stage <= 3; ++stage)
      expect_bitwise(runs[static_cast<size_t>(stage)], runs[0],
                     "W=" + std::to_string(world) + " gas " + std::to_string(gas) + ": stage " +
                         std::to_string(stage) + " vs 0");
  }
}

TEST(ZeroEquivalence, WorldSizesOneTwoFourAgreeWithinTolerance) {
  RunSpec spec;
  spec.clipping = 0.05;
  spec.world = 1;
  spec.stage = 0;
  RunResult reference = run_ok(spec);
  for (int world : {2, 4}) {
    for (int stage : {1, 3}) {
      spec.world = world;
      spec.stage = stage;
      expect_close(
          run_ok(spec), reference,
          "W=" + std::to_string(world) + " stage " + std::to_string(stage) + " vs W=1 stage 0");
    }
  }
}

TEST(ZeroEquivalence, Bf16AndFp16StayCloseToFp32) {
  // Same model and data in reduced precision: the training curves agree to
  // 16-bit accuracy (bf16: 8 mantissa bits). Tolerance: 5% on every loss.
  RunSpec spec;
  spec.stage = 2;
  RunResult fp32 = run_ok(spec);
  for (const char* precision : {"bf16", "fp16"}) {
    spec.precision = precision;
    RunResult low = run_ok(spec);
    EXPECT_LT(max_relative_difference(low.ranks[0].losses, fp32.ranks[0].losses), 0.05)
        << precision;
  }
}

// Optimizer state on NVMe under mpirun (the in-process cases:
// tests/core/engine/nvme_offload_test.cc): stage 3, bf16, the master weights
// and AdamW's state in swap files read and written in 4096-element tiles
// through a 3-buffer pipeline, bitwise as the same run in memory.
TEST(ZeroEquivalence, NvmeOptimizerOffloadIsBitwiseAsInMemory) {
  std::string folder = (std::filesystem::temp_directory_path() / "dscore-nvme-XXXXXX").string();
  ASSERT_NE(::mkdtemp(folder.data()), nullptr);
  RunSpec spec;
  spec.stage = 3;
  spec.precision = "bf16";
  spec.hidden = 100;  // 22,304 parameters: 3 tiles per rank, cutting through layers
  spec.clipping = 0.05;
  spec.steps = 6;
  spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  const RunResult memory = run_ok(spec);
  spec.zero_extra =
      R"("sub_group_size": 4096, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + folder +
      R"(", "pipeline_read": true, "pipeline_write": true, "buffer_count": 3})";
  const RunResult nvme = run_ok(spec);
  expect_bitwise(nvme, memory, "stage 3 bf16 W=2 with the optimizer state on NVMe");
  const std::string log = nvme.process.out + nvme.process.err;
  EXPECT_NE(log.find("optimizer state on NVMe in " + folder), std::string::npos) << log;
  EXPECT_NE(log.find("3 tile(s) of 4096 elements, 3 tile buffer(s)"), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::is_empty(folder)) << "swap files left in " << folder;
  std::filesystem::remove_all(folder);
}

// ZeRO-Offload (offload_optimizer.device "cpu", core/engine/
// host_offload_state.h): the master weights and AdamW's state in page-locked
// host memory (pin_memory), the gradients copied to the host as they are
// reduced, the update on the host in tiles of 4096 elements, the new
// parameters copied back on a copy stream. Bitwise as the same run with
// everything in the device's memory, at every stage that offloads, in fp32
// and bf16, with accumulation and clipping; the memory the ranks hold is
// what `dscore plan` predicts.
class HostOffload : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(HostOffload, IsBitwiseAsInMemoryAndAsPlanned) {
  const auto [stage, precision] = GetParam();
  RunSpec spec;
  spec.stage = stage;
  spec.precision = precision;
  spec.hidden = 100;  // 22,304 parameters: several tiles per rank, cutting through layers
  spec.gas = 2;
  spec.clipping = 0.05;
  spec.steps = 5;
  if (precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  const RunResult memory = run_ok(spec);
  spec.zero_extra =
      R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
  const RunResult offload = run_ok(spec);
  const std::string what = "stage " + std::to_string(stage) + " " + precision;
  expect_bitwise(offload, memory, what + " with ZeRO-Offload");
  const std::string log = offload.process.out + offload.process.err;
  EXPECT_NE(log.find("optimizer state in pinned host memory (ZeRO-Offload: "), std::string::npos)
      << log;
  EXPECT_NE(log.find(" tile(s) of 4096 elements, gradients copied as they are reduced"),
            std::string::npos)
      << log;
  // Every gradient the optimizer reads came as it was reduced (the padding
  // of the owned space is copied at the step).
  for (int rank = 0; rank < spec.world; ++rank) {
    const std::string line = "rank " + std::to_string(rank) + ": ZeRO-Offload's first update: ";
    const size_t at = log.find(line);
    ASSERT_NE(at, std::string::npos) << log;
    const int64_t early = std::stoll(log.substr(at + line.size()));
    const int64_t owned = std::stoll(log.substr(log.find(" of ", at + line.size()) + 4));
    EXPECT_GT(early, owned * 9 / 10) << what << " rank " << rank << ": " << log.substr(at, 160);
  }
  for (const RankReport& rank : offload.ranks) {
    ASSERT_EQ(rank.memory.size(), 6u) << what;
    ASSERT_EQ(rank.plan.size(), 6u) << what;
    EXPECT_EQ(rank.memory[2], rank.plan[2]) << what << ": master weights";
    EXPECT_EQ(rank.memory[3], rank.plan[3]) << what << ": optimizer state";
    EXPECT_EQ(rank.memory[5], rank.plan[5]) << what << ": offload tiles";
    EXPECT_GT(rank.memory[5], 0) << what;
  }
}

// fp16 with an overflow: step 3's gradients are Inf on rank 1, the update
// is skipped (no walk runs, the early copies of that step are void), and
// every later step matches the run in memory bit for bit.
TEST(ZeroEquivalence, HostOffloadSkipsAnOverflowAsInMemory) {
  RunSpec spec;
  spec.stage = 2;
  spec.precision = "fp16";
  spec.hidden = 100;
  spec.gas = 2;
  spec.steps = 6;
  const std::vector<std::string> poison = {"--poison-rank", "1", "--poison-step", "3"};
  const RunResult memory = run_workers(spec, poison);
  ASSERT_TRUE(memory.ok()) << memory.process.describe();
  spec.zero_extra = R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu"})";
  const RunResult offload = run_workers(spec, poison);
  ASSERT_TRUE(offload.ok()) << offload.process.describe();
  ASSERT_FALSE(offload.ranks.empty());
  ASSERT_EQ(offload.ranks[0].applied.size(), 6u);
  EXPECT_FALSE(offload.ranks[0].applied[3]) << "step 3 overflowed: skipped";
  EXPECT_TRUE(offload.ranks[0].applied[4]);
  EXPECT_EQ(offload.ranks[0].loss_scales, memory.ranks[0].loss_scales);
  // The poisoned step's loss is NaN on both sides; every other one equal.
  ASSERT_EQ(offload.ranks[0].losses.size(), memory.ranks[0].losses.size());
  for (size_t i = 0; i < memory.ranks[0].losses.size(); ++i) {
    const double a = offload.ranks[0].losses[i], b = memory.ranks[0].losses[i];
    EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b)))
        << "step " << i << ": " << a << " " << b;
  }
  EXPECT_TRUE(offload.params == memory.params)
      << "parameters differ (max rel " << max_relative_difference(offload.params, memory.params)
      << ")";
}

// An optimizer that does not write the 16-bit copy itself (the sdk's
// example, sgd_momentum, answers UNIMPLEMENTED to params_16bit, so the
// engine converts the master): ZeRO-Offload's update then converts each tile
// into the staging it sends, bitwise as in memory.
TEST(ZeroEquivalence, HostOffloadOfAnOptimizerWithoutThe16BitCopyIsBitwiseAsInMemory) {
  RunSpec spec;
  spec.stage = 2;
  spec.precision = "bf16";
  spec.hidden = 100;
  spec.steps = 3;
  spec.plugin_path = DSCORE_SGD_MOMENTUM_PLUGIN;
  spec.optimizer = R"({"type": "sgd_momentum", "params": {"lr": 0.01}})";
  spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  const RunResult memory = run_ok(spec);
  spec.zero_extra = R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu"})";
  const RunResult offload = run_ok(spec);
  expect_bitwise(offload, memory, "stage 2 bf16 sgd_momentum with ZeRO-Offload");
}

// Partial offload (offload_optimizer.ratio < 1 at stage 3, DeepSpeed's
// ZeRO-Offload++; core/owned_state/partial_offload_state.h): the first
// floor((1 - ratio) * G) of G sub-groups keep their master and AdamW state
// with the parameters and are updated there, the rest is ZeRO-Offload's.
// Bitwise as everything in memory, in fp32 and bf16, on the CPU device's
// memory and as from a GPU (DSCORE_CPU_DEVICE_MEMORY=separate), at ratio
// 0.5 (1 of 3 sub-groups kept per rank) and 0 (all kept); the memory the
// ranks hold is what the plan says.
TEST(ZeroEquivalence, PartialOffloadIsBitwiseAsInMemoryAndAsPlanned) {
  for (const std::string precision : {"fp32", "bf16"}) {
    RunSpec spec;
    spec.stage = 3;
    spec.precision = precision;
    spec.hidden = 100;  // about 11,000 owned elements per rank: 3 sub-groups of 4096
    spec.gas = 2;
    spec.clipping = 0.05;
    spec.steps = 4;
    if (precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
    const RunResult memory = run_ok(spec);
    for (const bool separate : {false, true}) {
      spec.env.clear();
      if (separate) spec.env.push_back("DSCORE_CPU_DEVICE_MEMORY=separate");
      for (const std::string ratio : {"0.5", "0"}) {
        spec.zero_extra =
            R"("sub_group_size": 4096, "offload_optimizer": {"device": "cpu", "ratio": )" + ratio +
            "}";
        const RunResult offload = run_ok(spec);
        const std::string what = precision + " ratio " + ratio +
                                 (separate ? " from separate memory" : " in host memory");
        expect_bitwise(offload, memory, what);
        const std::string log = offload.process.out + offload.process.err;
        const std::string kept = ratio == "0" ? ") with the parameters (offload_optimizer.ratio), "
                                                "nothing offloaded"
                                              : "rank 0: optimizer state owned elements [0, 4096) "
                                                "with the parameters (offload_optimizer.ratio), "
                                                "the other ";
        EXPECT_NE(log.find(kept), std::string::npos) << what << "\n" << log;
        for (const RankReport& rank : offload.ranks) {
          ASSERT_EQ(rank.memory.size(), 6u) << what;
          ASSERT_EQ(rank.plan.size(), 6u) << what;
          EXPECT_EQ(rank.memory[2], rank.plan[2]) << what << ": master weights";
          EXPECT_EQ(rank.memory[3], rank.plan[3]) << what << ": optimizer state";
          EXPECT_EQ(rank.memory[5], rank.plan[5]) << what << ": offload buffers";
        }
      }
    }
  }
}

// ZeRO-Infinity's CPU offload as from a GPU (DSCORE_CPU_DEVICE_MEMORY=
// separate: the engine treats device memory as the host's to reach only by
// copies): stage 3 with the parameter shards in pinned host memory
// (offload_param cpu, copied to the device by each gather) and the
// optimizer state in host memory or on NVMe, bitwise as everything in the
// device's memory, fp32 and bf16. Parameters offloaded (to host memory or
// NVMe) without the optimizer state are refused by name: the host update
// writes them.
TEST(ZeroEquivalence, ParametersInHostMemoryFromSeparateMemoryAreBitwiseAsInMemory) {
  std::string folder = (std::filesystem::temp_directory_path() / "dscore-params-XXXXXX").string();
  ASSERT_NE(::mkdtemp(folder.data()), nullptr);
  for (const std::string precision : {"fp32", "bf16"}) {
    RunSpec spec;
    spec.stage = 3;
    spec.precision = precision;
    spec.hidden = 100;
    spec.gas = 2;
    spec.clipping = 0.05;
    spec.steps = 4;
    if (precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
    const RunResult memory = run_ok(spec);
    spec.env.push_back("DSCORE_CPU_DEVICE_MEMORY=separate");
    const std::string params = R"(, "offload_param": {"device": "cpu", "pin_memory": true})";
    for (const std::string& optimizer :
         {std::string(R"({"device": "cpu"})"),
          R"({"device": "nvme", "nvme_path": ")" + folder + R"("})"}) {
      spec.zero_extra = R"("sub_group_size": 4096, "offload_optimizer": )" + optimizer + params;
      const RunResult offload = run_ok(spec);
      const std::string what = precision + " with the optimizer " + optimizer;
      expect_bitwise(offload, memory, what);
      const std::string log = offload.process.out + offload.process.err;
      EXPECT_NE(log.find("in pinned host memory (offload_param cpu), copied to the device by each "
                         "gather"),
                std::string::npos)
          << what << "\n"
          << log;
    }
    for (const std::string& device :
         {std::string(R"("cpu")"), R"("nvme", "nvme_path": ")" + folder + R"(")"}) {
      if (precision == "fp32" && device != R"("cpu")") continue;  // NVMe needs 16 bits anyway
      spec.zero_extra = R"("offload_param": {"device": )" + device + "}";
      const RunResult refused = run_workers(spec);
      EXPECT_FALSE(refused.ok()) << device;
      const std::string log = refused.process.out + refused.process.err;
      EXPECT_NE(log.find("offload_optimizer.device to \"cpu\" or \"nvme\""), std::string::npos)
          << log;
    }
  }
  std::filesystem::remove_all(folder);
}

INSTANTIATE_TEST_SUITE_P(Zero, HostOffload,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values("fp32", "bf16")),
                         [](const auto& info) {
                           return "stage" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

}  // namespace
}  // namespace dscore::testing
