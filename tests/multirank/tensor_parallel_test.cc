// Tensor parallelism (tensor_parallel.autotp_size, Megatron's split of the
// gpt and the llama) under real ranks (mpirun): a model split over 2 ranks trains as one
// rank does, and 2 tensor-parallel x 2 data-parallel ranks as 2
// data-parallel ranks, at ZeRO 0-2, with clipping active (the norm counts
// each replicated parameter once). Not bitwise: each split linear's output
// is a sum of two ranks' parts (and the vocab-parallel head's softmax sums
// two parts). Measured after 6 steps: losses within 6.3e-9 relative,
// parameters within 6e-5 (relative, floor 1e-3: Adam magnifies the rounding
// of near-zero gradient components); the bounds are 1e-7 and 1e-3. The
// gradient norms (printed to 6 digits by the worker) agree to the digit;
// counting the replicated parameters on both ranks made them 33% larger.
// The parameters compared are the whole tensors, gathered from the ranks'
// parts (Engine::gather_parameters).
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/core/cli/process.h"
#include "tests/multirank/parallel_specs.h"

namespace dscore::testing {
namespace {

std::string tp(int size) {
  return R"(, "tensor_parallel": {"autotp_size": )" + std::to_string(size) + "}";
}

TEST(TensorParallel, TwoRanksTrainAsOne) {
  RunSpec spec = parallel_gpt_spec();
  spec.world = 1;
  const RunResult one = run_ok(spec, "one rank");
  for (double norm : one.ranks[0].grad_norms) EXPECT_GT(norm, spec.clipping);
  spec.world = 2;
  const std::string base = spec.extra;
  spec.extra = base + tp(2);
  const RunResult two = run_ok(spec, "TP=2");
  expect_close(two, one, "TP=2 vs one rank");
  // Both ranks of the group report the same loss (the head's sums are the
  // group's).
  ASSERT_EQ(two.ranks.size(), 2u);
  EXPECT_EQ(two.ranks[0].losses, two.ranks[1].losses);
  // Activation checkpointing recomputes the same split arithmetic.
  spec.extra = base + tp(2) + R"(, "activation_checkpointing": {"number_checkpoints": 1})";
  expect_bitwise(run_ok(spec, "TP=2 checkpointed"), two, "TP=2 checkpointed vs kept");
}

TEST(TensorParallel, TwoByTwoTrainsAsTwoDataParallelRanksAtEveryZeroStage) {
  RunSpec spec = parallel_gpt_spec();
  spec.world = 2;
  const RunResult dp = run_ok(spec, "DP=2");
  spec.world = 4;
  const std::string base = spec.extra;
  for (int stage = 0; stage <= 3; ++stage) {
    spec.stage = stage;
    spec.extra = base + tp(2);
    expect_close(run_ok(spec, "TP=2 x DP=2 stage " + std::to_string(stage)), dp,
                 "TP=2 x DP=2 at ZeRO " + std::to_string(stage) + " vs DP=2");
  }
}

// ZeRO-Offload holds each part's partition on the host (or on NVMe): the
// same bits as in memory, at TP=2 x DP=2.
TEST(TensorParallel, OffloadIsBitwiseAsInMemory) {
  TempDir dir("dscore_tp_offload");
  for (int stage : {1, 2}) {
    RunSpec spec = parallel_gpt_spec();
    spec.world = 4;
    spec.stage = stage;
    spec.extra += tp(2);
    const RunResult in_memory = run_ok(spec, "TP=2 x DP=2 in memory");
    spec.zero_extra = R"("offload_optimizer": {"device": "cpu"})";
    expect_bitwise(run_ok(spec, "TP=2 x DP=2 offloaded"), in_memory,
                   "TP=2 x DP=2 offloaded at ZeRO " + std::to_string(stage));
    spec.zero_extra =
        R"("offload_optimizer": {"device": "nvme", "nvme_path": ")" + dir.path().string() + "\"}";
    expect_bitwise(run_ok(spec, "TP=2 x DP=2 on NVMe"), in_memory,
                   "TP=2 x DP=2 optimizer on NVMe at ZeRO " + std::to_string(stage));
  }
}

TEST(TensorParallel, Bf16TrainsAsOneRankWithinBf16Rounding) {
  RunSpec spec = parallel_gpt_spec();
  spec.precision = "bf16";
  spec.world = 1;
  const RunResult one = run_ok(spec, "bf16 one rank");
  spec.world = 2;
  spec.extra += tp(2);
  const RunResult two = run_ok(spec, "bf16 TP=2");
  ASSERT_FALSE(two.ranks.empty());
  // bf16 products of split operands round differently: 1e-2 on the loss.
  EXPECT_LT(max_relative_difference(two.ranks[0].losses, one.ranks[0].losses), 1e-2);
}

// The llama split the same way (q, k and v by heads: 4 query heads over 2
// key/value heads, each rank one key/value head and its 2 query heads; gate
// and up by rows; the vocabulary by rows), tied and untied head, with an odd
// vocabulary (255: 128 + 127) and odd MLP width per rank (40).
TEST(TensorParallel, LlamaTwoRanksTrainAsOneAndTwoByTwoAsTwo) {
  for (bool tied : {false, true}) {
    const std::string what = tied ? "tied" : "untied";
    RunSpec spec = parallel_llama_spec(tied);
    const std::string base = spec.extra;
    spec.world = 1;
    const RunResult one = run_ok(spec, "llama one rank " + what);
    spec.world = 2;
    spec.extra = base + tp(2);
    expect_close(run_ok(spec, "llama TP=2 " + what), one, "llama TP=2 vs one rank, " + what);
    if (tied) continue;
    const RunResult dp = [&] {
      RunSpec d = parallel_llama_spec(tied);
      d.world = 2;
      return run_ok(d, "llama DP=2");
    }();
    spec.world = 4;
    spec.stage = 1;
    expect_close(run_ok(spec, "llama TP=2 x DP=2 ZeRO 1"), dp, "llama TP=2 x DP=2 vs DP=2");
  }
}

// A TP=2 save holds whole tensors (each part's fragments say where they
// sit): it resumes at TP=2 bitwise as the uninterrupted run, and loads at
// one rank and at TP=2 x DP=2 with the masters and Adam's moments equal,
// bitwise, to what was saved; a one-rank save loads at TP=2 likewise. At
// ZeRO 0 and at ZeRO 3 (every rank saves its shards of its part).
TEST(TensorParallel, CheckpointsLoadAtAnotherTensorParallelSize) {
  TempDir dir("dscore_tp_checkpoint");
  for (int stage : {0, 3}) {
    SCOPED_TRACE("ZeRO stage " + std::to_string(stage));
    const std::string ck = (dir.path() / ("ck" + std::to_string(stage))).string();
    RunSpec spec = parallel_gpt_spec();
    spec.stage = stage;
    const std::string base = spec.extra;
    spec.world = 2;
    spec.extra = base + tp(2);
    const RunResult first = expect_resumes_bitwise(spec, ck, "TP=2");
    ASSERT_TRUE(first.ok() && !first.state.empty());

    const auto loaded_state = [&](int world, int tp_size, const std::string& from) {
      RunSpec at = parallel_gpt_spec();
      at.stage = stage;
      at.world = world;
      at.extra = base + (tp_size > 1 ? tp(tp_size) : "");
      const RunResult r = run_workers(at, {"--load", from, "--dump-state"});
      EXPECT_TRUE(r.ok()) << r.process.describe();
      return r.state;
    };
    EXPECT_EQ(loaded_state(1, 1, ck), first.state) << "TP=2 save loaded at one rank";
    EXPECT_EQ(loaded_state(4, 2, ck), first.state) << "TP=2 save loaded at TP=2 x DP=2";

    const std::string ck1 = ck + "_one";
    RunSpec one = parallel_gpt_spec();
    one.stage = stage;
    one.world = 1;
    const RunResult saved =
        run_workers(one, {"--save", ck1, "--save-step", "3", "--stop-after-save", "--dump-state"});
    ASSERT_TRUE(saved.ok()) << saved.process.describe();
    EXPECT_EQ(loaded_state(2, 2, ck1), saved.state) << "one-rank save loaded at TP=2";
  }
}

}  // namespace
}  // namespace dscore::testing
