// Rank and world from the launcher's environment variables.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/comm/job_env.h"

namespace dscore::comm {
namespace {

class JobEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK",
          "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "RANK", "WORLD_SIZE",
          "LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
          "LOCAL_WORLD_SIZE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID"})
      unsetenv(v);
  }
};

TEST_F(JobEnvTest, NoLauncherIsOneRank) {
  auto env = detect_job_env();
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->launcher, "none");
  EXPECT_EQ(env->ranks_on_node(), 1);
}

TEST_F(JobEnvTest, RanksOnThisNodeFromTheLauncher) {
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(detect_job_env()->ranks_on_node(), 4);
  clear();
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_EQ(detect_job_env()->ranks_on_node(), 2) << "unknown: every rank on this node";
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  EXPECT_EQ(detect_job_env()->ranks_on_node(), 1);
  clear();
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "7", 1);
  setenv("SLURM_TASKS_PER_NODE", "2(x3),1", 1);
  setenv("SLURM_NODEID", "2", 1);
  EXPECT_EQ(detect_job_env()->ranks_on_node(), 2);
  setenv("SLURM_NODEID", "3", 1);
  EXPECT_EQ(detect_job_env()->ranks_on_node(), 1);
}

TEST_F(JobEnvTest, MpirunVariables) {
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  auto env = detect_job_env();
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->launcher, "mpirun");
}

TEST_F(JobEnvTest, SrunAndTorchrunVariables) {
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  EXPECT_EQ(detect_job_env()->launcher, "srun");
  clear();
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "0", 1);
  auto env = detect_job_env();
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->world_size, 8);
}

TEST_F(JobEnvTest, InconsistentVariablesNameThemselves) {
  setenv("RANK", "8", 1);
  setenv("WORLD_SIZE", "8", 1);
  auto env = detect_job_env();
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("RANK=8 is not a rank of WORLD_SIZE=8"), std::string::npos);
  clear();
  setenv("OMPI_COMM_WORLD_RANK", "x", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_NE(detect_job_env().status().message().find("OMPI_COMM_WORLD_RANK"), std::string::npos);
  clear();
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_NE(detect_job_env().status().message().find("sets WORLD_SIZE but not RANK"),
            std::string::npos);
}

}  // namespace
}  // namespace dscore::comm
