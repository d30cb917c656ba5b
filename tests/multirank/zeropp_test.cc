// ZeRO++ at stage 3 under mpirun (4 ranks, one node): hpZ's secondary
// partition gives plain ZeRO-3's losses bit for bit, with the memory the
// plan adds for it; int8 weights and int4 gradients cut the bytes each rank
// sends per step by the factors their sizes predict and stay close to plain
// ZeRO-3's losses. Across hosts (the cross-node bytes, hpZ staying inside a
// node, qgZ's two hops): tests/core/cli/two_hosts_test.cc.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

RunSpec zeropp_spec() {
  RunSpec spec;
  spec.stage = 3;
  spec.world = 4;
  spec.hidden = 256;
  spec.layers = 2;
  spec.steps = 10;
  spec.persistence_threshold = 0;  // every parameter gathered in forward and backward
  spec.max_reuse_distance = 0;
  return spec;
}

// Bytes rank 0 sent per step, after the first.
double sent_per_step(const RunResult& r) {
  const auto& sent = r.ranks.at(0).wire_sent;
  return static_cast<double>(sent.back() - sent.front()) / static_cast<double>(sent.size() - 1);
}

TEST(ZeroPlusPlus, HpzGivesPlainStage3sLossesBitwiseWithThePlannedSecondaryCopy) {
  RunSpec spec = zeropp_spec();
  const RunResult plain = run_workers(spec);
  ASSERT_TRUE(plain.ok()) << plain.process.describe();
  spec.zero_extra = R"("zero_hpz_partition_size": 2)";
  const RunResult hpz = run_workers(spec);
  ASSERT_TRUE(hpz.ok()) << hpz.process.describe();
  EXPECT_NE(hpz.process.err.find("ZeRO++ hpZ: a secondary copy"), std::string::npos);
  ASSERT_EQ(hpz.ranks.size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(hpz.ranks[r].losses, plain.ranks[r].losses) << "rank " << r;
    // Buffers: the secondary piece (a half of every gathered parameter), as planned.
    const int64_t added = hpz.ranks[r].memory[4] - plain.ranks[r].memory[4];
    EXPECT_EQ(added, hpz.ranks[r].plan[4] - plain.ranks[r].plan[4]);
    EXPECT_GE(added, hpz.ranks[r].numel * 4 / 2);  // fp32: 4 bytes per element, half of them
  }
  EXPECT_EQ(hpz.params, plain.params);
  // The same bytes, but the backward's gathers stay in the secondary group
  // (halves of 4 ranks here; a node's ranks across hosts).
  EXPECT_NEAR(sent_per_step(hpz), sent_per_step(plain), 0.35 * sent_per_step(plain));
}

TEST(ZeroPlusPlus, QuantizedWeightsAndGradientsSendLessAndStayCloseToPlain) {
  RunSpec spec = zeropp_spec();
  const RunResult plain = run_workers(spec);
  ASSERT_TRUE(plain.ok()) << plain.process.describe();
  spec.zero_extra = R"("zero_quantized_weights": true)";
  const RunResult qw = run_workers(spec);
  ASSERT_TRUE(qw.ok()) << qw.process.describe();
  spec.zero_extra = R"("zero_quantized_weights": true, "zero_quantized_gradients": true)";
  const RunResult both = run_workers(spec);
  ASSERT_TRUE(both.ok()) << both.process.describe();
  // fp32: two gathers at 4 bytes -> 1, the reduction at 4 bytes -> 0.5
  // (plus a scale per block): 12 -> 6 with qwZ, 12 -> 2.5 with both.
  const double base = sent_per_step(plain);
  std::printf("bytes sent per step by rank 0: plain %.0f, qwZ %.0f (%.3f), qwZ+qgZ %.0f (%.3f)\n",
              base, sent_per_step(qw), sent_per_step(qw) / base, sent_per_step(both),
              sent_per_step(both) / base);
  std::printf("worst relative loss difference to plain: qwZ %.2e, qwZ+qgZ %.2e\n",
              max_relative_difference(qw.ranks[0].losses, plain.ranks[0].losses),
              max_relative_difference(both.ranks[0].losses, plain.ranks[0].losses));
  EXPECT_NEAR(sent_per_step(qw) / base, 6.0 / 12, 0.1) << base;
  EXPECT_NEAR(sent_per_step(both) / base, 2.5 / 12, 0.06) << base;
  EXPECT_LT(max_relative_difference(qw.ranks[0].losses, plain.ranks[0].losses), 5e-3);
  EXPECT_LT(max_relative_difference(both.ranks[0].losses, plain.ranks[0].losses), 2e-2);
  EXPECT_NE(qw.ranks[0].losses, plain.ranks[0].losses) << "quantization changed nothing";
  // Every rank computed on the same (dequantized) parameters.
  for (size_t r = 1; r < both.ranks.size(); ++r)
    EXPECT_EQ(both.ranks[r].losses, both.ranks[0].losses);
}

TEST(ZeroPlusPlus, RefusedByNameWhereItDoesNotRun) {
  RunSpec spec = zeropp_spec();
  spec.stage = 2;
  spec.zero_extra = R"("zero_quantized_gradients": true)";
  const RunResult r = run_workers(spec);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.process.err.find("zero_optimization.zero_quantized_gradients: ZeRO++ changes stage "
                               "3's collectives, and this run is at stage 2"),
            std::string::npos)
      << r.process.describe();
  spec.stage = 3;
  spec.zero_extra = R"("zero_hpz_partition_size": 3)";
  const RunResult odd = run_workers(spec);
  EXPECT_FALSE(odd.ok());
  EXPECT_NE(odd.process.err.find("zero_hpz_partition_size 3 does not divide the 4 ranks"),
            std::string::npos)
      << odd.process.describe();
}

}  // namespace
}  // namespace dscore::testing
