// Ulysses sequence parallelism (sequence_parallel_size: each sample's
// sequence split over the ranks of a sequence group, attention heads
// exchanged with all-to-all) under real ranks (mpirun): the gpt and the
// llama split over 2 ranks train as one rank does, 2 sequence-parallel x 2 data-parallel
// ranks as 2 data-parallel ranks at ZeRO 0-3, and 2 tensor-parallel x 2
// sequence-parallel ranks as one rank, with clipping active. Not bitwise:
// each rank's gradients are its slice's share of the whole sequence's
// mean, summed over the group (the losses likewise).
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/core/cli/process.h"
#include "tests/multirank/parallel_specs.h"

namespace dscore::testing {
namespace {

std::string sp(int size) { return R"(, "sequence_parallel_size": )" + std::to_string(size); }

TEST(SequenceParallel, TwoRanksTrainAsOne) {
  RunSpec spec = parallel_gpt_spec();
  spec.world = 1;
  const RunResult one = run_ok(spec, "one rank");
  for (double norm : one.ranks[0].grad_norms) EXPECT_GT(norm, spec.clipping);
  spec.world = 2;
  const std::string base = spec.extra;
  spec.extra = base + sp(2);
  const RunResult two = run_ok(spec, "SP=2");
  expect_close(two, one, "SP=2 vs one rank");
  ASSERT_EQ(two.ranks.size(), 2u);
  EXPECT_EQ(two.ranks[0].losses, two.ranks[1].losses);
  // Activation checkpointing recomputes the same exchanges.
  spec.extra = base + sp(2) + R"(, "activation_checkpointing": {"number_checkpoints": 1})";
  expect_bitwise(run_ok(spec, "SP=2 checkpointed"), two, "SP=2 checkpointed vs kept");
}

TEST(SequenceParallel, TwoByTwoTrainsAsTwoDataParallelRanksAtEveryZeroStage) {
  RunSpec spec = parallel_gpt_spec();
  spec.world = 2;
  const RunResult dp = run_ok(spec, "DP=2");
  spec.world = 4;
  const std::string base = spec.extra;
  for (int stage = 0; stage <= 3; ++stage) {
    spec.stage = stage;
    spec.extra = base + sp(2);
    expect_close(run_ok(spec, "SP=2 x DP=2 stage " + std::to_string(stage)), dp,
                 "SP=2 x DP=2 at ZeRO " + std::to_string(stage) + " vs DP=2");
  }
}

// ZeRO-Offload partitions the state over the same data x sequence ranks:
// the optimizer on the host (stage 2) and the parameters too (stage 3)
// give the in-memory run's bits.
TEST(SequenceParallel, OffloadIsBitwiseAsInMemory) {
  for (int stage : {2, 3}) {
    RunSpec spec = parallel_gpt_spec();
    spec.world = 2;
    spec.stage = stage;
    spec.extra += sp(2);
    const RunResult in_memory = run_ok(spec, "SP=2 in memory");
    spec.zero_extra = R"("offload_optimizer": {"device": "cpu"})";
    if (stage == 3) spec.zero_extra += R"(, "offload_param": {"device": "cpu"})";
    expect_bitwise(run_ok(spec, "SP=2 offloaded"), in_memory,
                   "SP=2 offloaded at ZeRO " + std::to_string(stage));
  }
}

TEST(SequenceParallel, WithTensorParallelismTrainsAsOneRank) {
  RunSpec spec = parallel_gpt_spec();
  spec.world = 1;
  const RunResult one = run_ok(spec, "one rank");
  spec.world = 4;
  spec.stage = 1;
  spec.extra += sp(2) + R"(, "tensor_parallel": {"autotp_size": 2})";
  expect_close(run_ok(spec, "TP=2 x SP=2"), one, "TP=2 x SP=2 vs one rank");
}

TEST(SequenceParallel, Bf16TrainsAsOneRankWithinBf16Rounding) {
  RunSpec spec = parallel_gpt_spec();
  spec.precision = "bf16";
  spec.world = 1;
  const RunResult one = run_ok(spec, "bf16 one rank");
  spec.world = 2;
  spec.extra += sp(2);
  const RunResult two = run_ok(spec, "bf16 SP=2");
  ASSERT_FALSE(two.ranks.empty());
  const double losses = max_relative_difference(two.ranks[0].losses, one.ranks[0].losses);
  std::printf("bf16 SP=2 vs one rank: losses within %.3g\n", losses);
  EXPECT_LT(losses, 1e-2);
}

// The llama the same way, its RoPE at each slice's positions: 4 query
// heads over 2 key/value heads, each rank of the sequence group attending
// with 2 query heads and their key/value head; tied and untied head; and
// with tensor parallelism (each of 2 parts' 2 query heads and 1 key/value
// head split again: 4 heads over TP=2 x SP=2 needs 4 query and 4 key/value
// heads, so that spec has 4 key/value heads).
TEST(SequenceParallel, LlamaTwoRanksTrainAsOneAndWithTensorParallelism) {
  for (bool tied : {false, true}) {
    const std::string what = tied ? "tied" : "untied";
    RunSpec spec = parallel_llama_spec(tied);
    const std::string base = spec.extra;
    spec.world = 1;
    const RunResult one = run_ok(spec, "llama one rank " + what);
    spec.world = 2;
    spec.extra = base + sp(2);
    expect_close(run_ok(spec, "llama SP=2 " + what), one, "llama SP=2 vs one rank, " + what);
  }
  RunSpec spec = parallel_llama_spec(false, 4);
  spec.world = 1;
  const RunResult one = run_ok(spec, "llama (4 key/value heads) one rank");
  spec.world = 4;
  spec.stage = 3;
  spec.extra += sp(2) + R"(, "tensor_parallel": {"autotp_size": 2})";
  expect_close(run_ok(spec, "llama TP=2 x SP=2"), one, "llama TP=2 x SP=2 at ZeRO 3 vs one rank");
}

// The parameters and optimizer state are replicated over the sequence
// group (partitioned with the data-parallel ranks by ZeRO): an SP=2 save
// loads at one rank with the masters and Adam's moments equal, bitwise, to
// what was saved, and resumes at SP=2 as the uninterrupted run.
TEST(SequenceParallel, CheckpointsLoadAtAnotherSequenceParallelSize) {
  TempDir dir("dscore_sp_checkpoint");
  const std::string ck = (dir.path() / "ck").string();
  RunSpec spec = parallel_gpt_spec();
  const std::string base = spec.extra;
  spec.world = 2;
  spec.stage = 2;
  spec.extra = base + sp(2);
  const RunResult first = expect_resumes_bitwise(spec, ck, "SP=2");
  ASSERT_TRUE(first.ok() && !first.state.empty());

  RunSpec at_one = parallel_gpt_spec();
  at_one.world = 1;
  at_one.stage = 2;
  const RunResult one = run_workers(at_one, {"--load", ck, "--dump-state"});
  ASSERT_TRUE(one.ok()) << one.process.describe();
  EXPECT_EQ(one.state, first.state) << "SP=2 save loaded at one rank";
}

}  // namespace
}  // namespace dscore::testing
