// The "mpi" comm plugin's collectives on known values under a real mpirun,
// at world sizes 2, 3 and 4 (mpi_collectives_worker.cc holds the checks):
// sums in rank order, AVG, MAX, in-place variants, uneven sizes, bf16
// reduce-scatter rounded once, broadcast, barrier, counters.
#include <gtest/gtest.h>

#include <unistd.h>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

class MpiCollectives : public ::testing::TestWithParam<int> {};

TEST_P(MpiCollectives, EveryCollectiveComputesTheExpectedValues) {
  std::vector<std::string> argv = {
      MPIRUN, "-n", std::to_string(GetParam()), "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.push_back(WORKER);
  ProcessOptions options;
  options.env = mpi_test_env();
  ProcessResult r = run_process(argv, options);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.rfind("OK ", 0), 0u) << r.describe();
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiCollectives, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "W" + std::to_string(info.param); });

}  // namespace
}  // namespace dscore::testing
