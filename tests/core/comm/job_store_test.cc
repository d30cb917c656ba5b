// Which key-value store a job gets (core/comm/job_store.h): none of its own
// for one rank, the TCP store at MASTER_ADDR:MASTER_PORT for several, opened
// on first use, and a message naming both variables and the launcher's way
// of setting them when they are missing.
#include "core/comm/job_store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <future>

#include "core/comm/tcp_kv.h"

#define EXPECT_CONTAINS(text, piece) \
  EXPECT_NE(std::string(text).find(piece), std::string::npos) << (text)

namespace dscore::comm {
namespace {

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v :
         {"MASTER_ADDR", "MASTER_PORT", "DSCORE_KV_PORT", "TORCHELASTIC_USE_AGENT_STORE"})
      unsetenv(v);
  }
  static JobEnv job(int rank, int world, const char* launcher = "mpirun") {
    JobEnv env;
    env.rank = rank;
    env.world_size = world;
    env.launcher = launcher;
    return env;
  }
};

TEST_F(JobStoreTest, OneRankKeepsTheHostsOwnStore) {
  EXPECT_EQ(make_job_kv(job(0, 1, "none"), 1000), nullptr);
}

TEST_F(JobStoreTest, WithoutMasterAddrAndPortTheFirstUseFailsNamingBoth) {
  // Creating the store costs nothing and needs no variable (the mpi backend
  // never uses it); the first kv call says what is missing.
  auto kv = make_job_kv(job(1, 4), 1000);
  ASSERT_NE(kv, nullptr);
  Result<std::string> v = kv->get("dscore.nccl.unique_id.1", 1000);
  ASSERT_EQ(v.status().code(), DSCORE_FAILED_PRECONDITION);
  const std::string& m = v.status().message();
  EXPECT_CONTAINS(m, "this job's 4 ranks are separate processes (mpirun)");
  EXPECT_CONTAINS(m, "MASTER_ADDR and MASTER_PORT are not set");
  EXPECT_CONTAINS(m, "mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500");
  EXPECT_EQ(kv->set("k", "v").code(), DSCORE_FAILED_PRECONDITION);

  Status srun = make_job_kv(job(0, 2, "srun"), 1000)->set("k", "v");
  EXPECT_CONTAINS(srun.message(), "scontrol show hostnames");
  setenv("MASTER_ADDR", "node1", 1);
  Status port_only = make_job_kv(job(0, 2), 1000)->set("k", "v");
  EXPECT_CONTAINS(port_only.message(), "MASTER_PORT is not set");
  setenv("MASTER_PORT", "29x", 1);
  Status bad = make_job_kv(job(0, 2), 1000)->set("k", "v");
  EXPECT_EQ(bad.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(bad.message(), "MASTER_PORT=\"29x\" is not a TCP port");
}

TEST_F(JobStoreTest, RanksShareTheStoreAtMasterAddrAndPort) {
  Result<int> port = pick_free_port();
  ASSERT_TRUE(port.ok());
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(*port).c_str(), 1);
  // Rank 1 first: it waits for rank 0's server.
  auto rank1 = std::async(std::launch::async, [] {
    auto kv = make_job_kv(job(1, 2), 20000);
    return kv->get("from.0", 20000);
  });
  auto rank0 = make_job_kv(job(0, 2), 20000);
  ASSERT_TRUE(rank0->set("from.0", std::string("id\0id", 5)).ok());
  Result<std::string> got = rank1.get();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, std::string("id\0id", 5));
  // A second engine of the same rank shares the store (one server per port).
  EXPECT_EQ(make_job_kv(job(0, 2), 20000), rank0);
}

TEST_F(JobStoreTest, DscoreKvPortAndTorchrunsAgentStoreMoveThePort) {
  Result<int> port = pick_free_port();
  ASSERT_TRUE(port.ok());
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(*port - 1).c_str(), 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  // torch's TCPStore holds MASTER_PORT: dscore's is on the next port.
  Status st = make_job_kv(job(1, 2, "torchrun"), 200)->set("k", "v");
  EXPECT_CONTAINS(st.message(), "127.0.0.1:" + std::to_string(*port) + " within 200 ms");
  setenv("DSCORE_KV_PORT", std::to_string(*port).c_str(), 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  auto rank0 = make_job_kv(job(0, 2, "torchrun"), 2000);
  ASSERT_TRUE(rank0->set("k", "v").ok());
  EXPECT_EQ(*make_job_kv(job(1, 2, "torchrun"), 2000)->get("k", 1000), "v");
}

}  // namespace
}  // namespace dscore::comm
