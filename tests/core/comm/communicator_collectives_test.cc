// The shared collective checks (tests/multirank/collective_checks.h: the
// reductions, broadcast, send/recv, all_to_all_v with uneven counts,
// groups) on the one-rank local backend through the host's Communicator,
// and their all_to_all_v check on 3 loopback ranks (threads; the loopback
// test backend counts no wire bytes). The mpi and nccl plugins pass all of
// them under mpirun
// (tests/multirank/mpi_collectives_test.cc, tests/plugins/comm/nccl). A
// plugin built against an ABI copy without all_to_all_v is told so by name.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"
#include "tests/core/comm/loopback_ranks.h"
#include "tests/multirank/collective_checks.h"

namespace dscore::comm {
namespace {

using dscore::testing::CheckLog;
using dscore::testing::HostCheckedComm;

void run_checks_on(const std::string& dir, const std::string& backend, int world, bool all) {
  testing::run_ranks(dir, backend, world, [&](std::unique_ptr<Communicator> comm, int r) {
    HostCheckedComm c(std::move(comm));
    CheckLog log(r);
    if (all)
      dscore::testing::run_collective_checks(c, {}, &log);
    else
      dscore::testing::run_all_to_all_v_check(c, &log);
    EXPECT_GT(log.checks(), all ? 20 : 1);
    EXPECT_EQ(log.failures(), 0) << backend << " rank " << r << " (see stderr)";
    // all_to_all_v is counted as DeepSpeed's all_to_all_single.
    EXPECT_EQ(c.get().counters().at("all_to_all_v").calls, 1u);
  });
}

TEST(CommunicatorCollectives, LoopbackRanksMoveUnevenAllToAllV) {
  run_checks_on(DSCORE_BUILD_PLUGIN_DIR, "loopback", 3, /*all=*/false);
}

TEST(CommunicatorCollectives, TheLocalBackendPassesEveryCheck) {
  run_checks_on(DSCORE_BUILD_PLUGIN_DIR, "local", 1, /*all=*/true);
}

TEST(CommunicatorCollectives, APluginWithoutAllToAllVIsNamed) {
  const std::string minor = "v1_1";
  testing::run_ranks(std::string(DSCORE_TEST_PLUGIN_DIR) + "/abi_comm_" + minor,
                     "abi_comm_" + minor, 1, [&](std::unique_ptr<Communicator> comm, int) {
                       std::vector<float> a(2, 1.0f), b(2, 0.0f);
                       const Communicator::AllToAllLayout l{{2}, {0}, {2}, {0}};
                       const Status st = comm->all_to_all_v({a.data(), DSCORE_DTYPE_F32, 2},
                                                            {b.data(), DSCORE_DTYPE_F32, 2}, l);
                       EXPECT_EQ(st.code(), DSCORE_UNIMPLEMENTED);
                       EXPECT_NE(st.message().find("has no all_to_all_v"), std::string::npos)
                           << st.message();
                     });
}

TEST(CommunicatorCollectives, ALayoutOutsideTheBuffersIsRefused) {
  testing::run_ranks(
      DSCORE_BUILD_PLUGIN_DIR, "local", 1, [&](std::unique_ptr<Communicator> comm, int) {
        std::vector<float> a(2, 1.0f), b(2, 0.0f);
        const Communicator::AllToAllLayout l{{2}, {1}, {2}, {0}};
        const Status st =
            comm->all_to_all_v({a.data(), DSCORE_DTYPE_F32, 2}, {b.data(), DSCORE_DTYPE_F32, 2}, l);
        EXPECT_EQ(st.code(), DSCORE_INVALID_ARGUMENT);
        EXPECT_NE(st.message().find("reach outside the send (2)"), std::string::npos)
            << st.message();
      });
}

}  // namespace
}  // namespace dscore::comm
