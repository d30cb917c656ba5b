// The runs the tensor- and sequence-parallel tests compare
// (tensor_parallel_test.cc, sequence_parallel_test.cc): a small gpt and llama
// on the quickstart text with clipping active, and the comparison of a split
// run with its reference (not bitwise: split sums round differently).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/multirank/equivalence_checks.h"
#include "tests/multirank/harness.h"

namespace dscore::testing {

// 2 blocks, 4 heads, 16 positions; 6 steps of 8 samples; clipping at 0.05
// (below every step's norm, so it acts).
inline RunSpec parallel_gpt_spec() {
  RunSpec spec;
  spec.model =
      R"({"type": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16, "vocab_size": 256})";
  spec.extra = std::string(R"("data": {"type": "text", "path": ")") + DSCORE_SOURCE_DIR +
               R"(/configs/data/quickstart.txt"})";
  spec.train_batch = 8;
  spec.steps = 6;
  spec.clipping = 0.05;
  return spec;
}

// The llama: 4 query heads over `kv_heads` key/value heads, an odd
// vocabulary (255) and MLP width 80, tied or untied head.
inline RunSpec parallel_llama_spec(bool tied, int kv_heads = 2) {
  RunSpec spec = parallel_gpt_spec();
  spec.model = std::string(R"({"type": "llama", "vocab_size": 255, "hidden_size": 32,
      "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": )") +
               std::to_string(kv_heads) + R"(, "max_position_embeddings": 16, "block_size": 16,
      "tie_word_embeddings": )" +
               (tied ? "true" : "false") + "}";
  return spec;
}

// Losses within 1e-7, gradient norms 1e-5 and parameters 1e-3 (relative,
// floor 1e-3: Adam magnifies the rounding of near-zero gradient
// components) of the reference's; prints the losses' and parameters'.
inline void expect_close(const RunResult& r, const RunResult& reference, const std::string& what) {
  ASSERT_FALSE(r.ranks.empty()) << what;
  ASSERT_FALSE(reference.ranks.empty()) << what;
  ASSERT_EQ(r.ranks[0].losses.size(), reference.ranks[0].losses.size()) << what;
  ASSERT_EQ(r.params.size(), reference.params.size()) << what;
  const double losses = max_relative_difference(r.ranks[0].losses, reference.ranks[0].losses);
  const double params = max_relative_difference(r.params, reference.params, 1e-3);
  std::printf("%s: losses within %.3g, parameters within %.3g (relative)\n", what.c_str(), losses,
              params);
  EXPECT_LT(losses, 1e-7) << what;
  EXPECT_LT(max_relative_difference(r.ranks[0].grad_norms, reference.ranks[0].grad_norms), 1e-5)
      << what;
  EXPECT_LT(params, 1e-3) << what;
}

// `spec` saved into `ck` after 3 of its steps (stopping there, its state
// dumped) and resumed from it: the two halves' losses and the final
// parameters are the uninterrupted run's, bitwise. Returns the saving run
// (its dumped state: what loads elsewhere must equal), or a run that did
// not complete.
inline RunResult expect_resumes_bitwise(const RunSpec& spec, const std::string& ck,
                                        const std::string& what) {
  const RunResult full = run_ok(spec, what + " uninterrupted");
  RunResult first =
      run_workers(spec, {"--save", ck, "--save-step", "3", "--stop-after-save", "--dump-state"});
  EXPECT_TRUE(first.ok() && !first.state.empty()) << what << "\n" << first.process.describe();
  const RunResult second = run_workers(spec, {"--load", ck});
  EXPECT_TRUE(second.ok()) << what << "\n" << second.process.describe();
  if (!first.ok() || first.ranks.empty() || !second.ok() || second.ranks.empty()) return first;
  std::vector<double> losses = first.ranks[0].losses;
  losses.insert(losses.end(), second.ranks[0].losses.begin(), second.ranks[0].losses.end());
  EXPECT_EQ(losses, full.ranks.at(0).losses) << what;
  EXPECT_EQ(second.params, full.params) << what;
  return first;
}

}  // namespace dscore::testing
