// Assertions shared by the model equivalence tests under mpirun (gpt,
// llama): a run that must succeed with one loss per step, and two runs
// equal bit for bit (losses and final parameters).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/multirank/harness.h"

namespace dscore::testing {

inline RunResult run_ok(const RunSpec& spec, const std::string& what) {
  RunResult r = run_workers(spec);
  EXPECT_TRUE(r.ok()) << what << "\n" << r.process.describe();
  EXPECT_EQ(r.ranks.empty() ? 0u : r.ranks[0].losses.size(), static_cast<size_t>(spec.steps))
      << what;
  return r;
}

inline void expect_bitwise(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_FALSE(a.ranks.empty());
  ASSERT_FALSE(b.ranks.empty());
  EXPECT_EQ(a.ranks[0].losses, b.ranks[0].losses) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  EXPECT_TRUE(a.params == b.params) << what << ": parameters differ (max rel "
                                    << max_relative_difference(a.params, b.params) << ")";
}

}  // namespace dscore::testing
