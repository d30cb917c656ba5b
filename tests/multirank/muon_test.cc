// Muon (plugins/optimizers/muon) under ZeRO with real processes under
// mpirun: its whole-matrix step (core/engine/preconditioner.h) gathers each
// weight matrix from the ranks that own its parts, so the partitioning must
// not show in the numbers.
//  - Without clipping, stages 0-3 are bitwise equal at one world size.
//  - With clipping acting, stages 1-3 are bitwise equal, and stage 0
//    differs: as in DeepSpeed, stages 1-3 clip by the norm of the
//    orthogonalized update, stage 0 clips the gradients before Muon.
//  - One rank against two: the losses within the equivalence tolerance.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

RunSpec muon_spec(int world, int stage, double clipping, const std::string& precision = "fp32",
                  double muon_lr = 0.02) {
  RunSpec spec;
  spec.world = world;
  spec.stage = stage;
  spec.precision = precision;
  spec.clipping = clipping;
  spec.optimizer = R"({"type": "Muon", "params": {"muon_lr": )" + std::to_string(muon_lr) +
                   R"(, "adam_lr": 0.003, "weight_decay": 0.01}})";
  spec.scheduler = "";
  // Small partitions: at 2 ranks every stage splits some matrices.
  spec.persistence_threshold = 0;
  if (precision == "bf16") spec.extra = R"("data_types": {"grad_accum_dtype": "bf16"})";
  return spec;
}

RunResult run_ok(const RunSpec& spec) {
  RunResult r = run_workers(spec);
  EXPECT_TRUE(r.ok()) << "Muon stage " << spec.stage << " W=" << spec.world << "\n"
                      << r.process.describe();
  EXPECT_EQ(r.ranks.empty() ? 0u : r.ranks[0].losses.size(), static_cast<size_t>(spec.steps));
  return r;
}

bool same(const RunResult& a, const RunResult& b) {
  return !a.ranks.empty() && !b.ranks.empty() && a.ranks[0].losses == b.ranks[0].losses &&
         a.params == b.params;
}

TEST(Muon, StagesAreBitwiseEqualWithoutClipping) {
  std::vector<RunResult> runs;
  // Unclipped, Muon's steps are large: a smaller lr for this model.
  for (int stage = 0; stage <= 3; ++stage)
    runs.push_back(run_ok(muon_spec(2, stage, 0, "fp32", 0.002)));
  for (int stage = 1; stage <= 3; ++stage)
    EXPECT_TRUE(same(runs[static_cast<size_t>(stage)], runs[0]))
        << "stage " << stage << " vs 0: max rel loss difference "
        << max_relative_difference(runs[static_cast<size_t>(stage)].ranks[0].losses,
                                   runs[0].ranks[0].losses);
}

TEST(Muon, ClippingSeesTheUpdateAtStagesOneToThree) {
  std::vector<RunResult> runs;
  for (int stage = 0; stage <= 3; ++stage) runs.push_back(run_ok(muon_spec(2, stage, 1.0)));
  for (int stage = 2; stage <= 3; ++stage)
    EXPECT_TRUE(same(runs[static_cast<size_t>(stage)], runs[1])) << "stage " << stage << " vs 1";
  ASSERT_FALSE(runs[0].ranks.empty());
  ASSERT_FALSE(runs[1].ranks.empty());
  // The norm at stage 1 is the orthogonalized update's (each 64x64 matrix
  // ~8), far above the raw gradients' at stage 0; so clipping acted there.
  EXPECT_GT(runs[1].ranks[0].grad_norms[0], 4.0);
  EXPECT_LT(runs[0].ranks[0].grad_norms[0], 1.0);
  EXPECT_NE(runs[0].ranks[0].losses, runs[1].ranks[0].losses);
}

TEST(Muon, OneRankAgainstTwo) {
  const RunResult one = run_ok(muon_spec(1, 1, 1.0));
  const RunResult two = run_ok(muon_spec(2, 3, 1.0));
  ASSERT_FALSE(one.ranks.empty());
  ASSERT_FALSE(two.ranks.empty());
  // The losses as the equivalence tests bound them (measured 8e-7). The
  // parameters looser: the fp16 Newton-Schulz quantizes each update to
  // 2^-11 of its size, so the 1e-7 the two groupings of the mean leave in a
  // gradient can move an element of the update by a whole fp16 step; those
  // add up to ~1e-5 absolute on weights of ~0.1-0.3 (measured 2.3e-4
  // relative to max(|w|, 0.1)).
  EXPECT_LT(max_relative_difference(one.ranks[0].losses, two.ranks[0].losses), 1e-5);
  EXPECT_LT(max_relative_difference(one.params, two.params, 0.1), 1e-3);
}

TEST(Muon, Bf16StagesAreBitwiseEqual) {
  const RunResult one = run_ok(muon_spec(2, 1, 1.0, "bf16"));
  const RunResult three = run_ok(muon_spec(2, 3, 1.0, "bf16"));
  EXPECT_TRUE(same(one, three));
}

TEST(Muon, OptimizerOffloadIsRefusedByName) {
  RunSpec spec = muon_spec(2, 2, 0);
  spec.zero_extra = R"("offload_optimizer": {"device": "cpu"})";
  const RunResult r = run_workers(spec);
  EXPECT_FALSE(r.ok());
  EXPECT_NE((r.process.out + r.process.err).find("offload_optimizer"), std::string::npos)
      << r.process.describe();
}

}  // namespace
}  // namespace dscore::testing
