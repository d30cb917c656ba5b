// The job's key-value store across real processes under mpirun
// (kv_worker.cc): every rank reads every other rank's key through the TCP
// store rank 0 serves at MASTER_ADDR:MASTER_PORT; without those variables
// the first use says how to pass them with mpirun.
#include <gtest/gtest.h>

#include <unistd.h>

#include "core/comm/tcp_kv.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

std::vector<std::string> mpirun(int ranks, const std::vector<std::string>& exports) {
  std::vector<std::string> argv = {MPIRUN,      "-n",  std::to_string(ranks), "--oversubscribe",
                                   "--bind-to", "none"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const std::string& e : exports) {
    argv.push_back("-x");
    argv.push_back(e);
  }
  argv.push_back(KV_WORKER);
  return argv;
}

ProcessOptions options() {
  ProcessOptions o;
  o.env = mpi_test_env();
  o.env["MASTER_ADDR"] = std::nullopt;
  o.env["MASTER_PORT"] = std::nullopt;
  o.timeout = std::chrono::seconds(120);
  return o;
}

TEST(JobStoreUnderMpirun, EveryRankReadsEveryOtherRanksKey) {
  Result<int> port = comm::pick_free_port();
  ASSERT_TRUE(port.ok()) << port.status().message();
  ProcessResult r = run_process(
      mpirun(3, {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(*port)}), options());
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(lines_starting_with(r.out, "rank " + std::to_string(rank) + " read 3 keys").size(),
              1u)
        << r.describe();
}

TEST(JobStoreUnderMpirun, WithoutMasterAddrAndPortTheErrorSaysHowToPassThem) {
  ProcessResult r = run_process(mpirun(2, {}), options());
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("(mpirun), and a plugin needs the job's key-value store"), std::string::npos)
      << r.describe();
  EXPECT_NE(r.err.find("mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500"),
            std::string::npos)
      << r.describe();
}

}  // namespace
}  // namespace dscore::testing
