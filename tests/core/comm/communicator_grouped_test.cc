// Communicator::grouped through the host's fallback: backends without
// group_start/group_end get a group's calls one by one, with the same
// results and errors as a backend that runs groups itself (the mpi plugin,
// checked under mpirun by tests/multirank/mpi_collectives_test.cc with the
// same checks). Here: 4 loopback ranks (threads; a current-ABI plugin whose
// entries are NULL) and the single-rank comm plugins built in C against
// the frozen ABI 1.0 and 1.1 headers, whose vtables end before the entries.
#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "core/comm/communicator.h"
#include "core/plugin_host/host_context.h"
#include "tests/core/comm/loopback_ranks.h"
#include "tests/multirank/collective_checks.h"

namespace dscore::comm {
namespace {

using dscore::testing::CheckLog;
using dscore::testing::HostCheckedComm;

// Runs the grouped checks on `world` ranks (threads) of `backend`.
void run_grouped_checks_on(const std::string& dir, const std::string& backend, int world) {
  testing::run_ranks(dir, backend, world, [&](std::unique_ptr<Communicator> comm, int r) {
    EXPECT_FALSE(comm->has_native_groups()) << backend;
    HostCheckedComm c(std::move(comm));
    CheckLog log(r);
    dscore::testing::run_grouped_checks(c, 0, &log);
    EXPECT_GT(log.checks(), 20);
    EXPECT_EQ(log.failures(), 0) << backend << " rank " << r << " (see stderr)";
    // The fallback counts each call as the backend's own calls would.
    EXPECT_GE(c.get().counters().at("reduce_scatter").calls, 4u);
  });
}

TEST(CommunicatorGrouped, LoopbackWithoutEntriesFallsBackOneByOne) {
  run_grouped_checks_on(DSCORE_BUILD_PLUGIN_DIR, "loopback", 4);
}

TEST(CommunicatorGrouped, OldAbiPluginsFallBackOneByOne) {
  for (const char* minor : {"v1_0", "v1_1"}) {
    SCOPED_TRACE(minor);
    run_grouped_checks_on(std::string(DSCORE_TEST_PLUGIN_DIR) + "/abi_comm_" + minor,
                          std::string("abi_comm_") + minor, 1);
  }
}

TEST(CommunicatorGrouped, GroupsDoNotNest) {
  auto plugins = testing::build_plugin_registry();
  config::CommConfig config;
  config.backend = "local";
  config.timeout_ms = 20000;
  JobEnv env;
  env.world_size = 1;
  auto comm = Communicator::create(*plugins, config, env, 42);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  Status inner;
  const Status outer = (*comm)->grouped([&] {
    inner = (*comm)->grouped([] { return Status::Ok(); });
    return Status::Ok();
  });
  EXPECT_TRUE(outer.ok()) << outer.message();
  EXPECT_FALSE(inner.ok());
  EXPECT_NE(inner.message().find("do not nest"), std::string::npos) << inner.message();
}

}  // namespace
}  // namespace dscore::comm
