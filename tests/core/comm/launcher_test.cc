// The launcher commands `dscore run -n` and `dscore run --hostfile` start
// (core/comm/launcher.h): mpirun's host list and passed variables, srun's
// node list inside an allocation, the master address and port, and what
// cannot be honoured refused by name. The commands themselves run in
// tests/core/cli/run_command_test.cc.
#include "core/comm/launcher.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace dscore::comm {
namespace {

// Sets (or with nullptr removes) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old, had_ = true;
    value != nullptr ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

HostLaunch two_hosts() {
  HostLaunch launch;
  launch.hosts = {{"node-a", {0, 1}}, {"node-b", {0, 1}}};
  launch.args = {"run", "--config", "c.json"};
  return launch;
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

TEST(Launcher, OpenmpiGetsTheHostListAndPassesTheSettings) {
  ScopedEnv slurm("SLURM_JOB_ID", nullptr);
  ScopedEnv port("MASTER_PORT", nullptr);
  ScopedEnv setting("DSCORE_LOG_LEVEL", "debug");
  auto c = host_launch(two_hosts());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->launcher, "openmpi");
  const std::string line = joined(c->argv);
  EXPECT_NE(line.find("-n 4 --host node-a:2,node-b:2 --bind-to none"), std::string::npos) << line;
  EXPECT_NE(line.find("-x MASTER_ADDR -x MASTER_PORT"), std::string::npos) << line;
  EXPECT_NE(line.find("-x DSCORE_LOG_LEVEL"), std::string::npos) << line;
  EXPECT_NE(line.find("run --config c.json"), std::string::npos) << line;
  // rank 0 runs on the first host; DeepSpeed's default port there.
  EXPECT_EQ(shell_line(*c).rfind("MASTER_ADDR=node-a MASTER_PORT=29500 ", 0), 0u) << shell_line(*c);
}

TEST(Launcher, MasterAddressAndPortCanBeChosen) {
  ScopedEnv slurm("SLURM_JOB_ID", nullptr);
  HostLaunch launch = two_hosts();
  launch.master_addr = "10.0.0.7";
  launch.master_port = 31000;
  auto c = host_launch(launch);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(shell_line(*c).rfind("MASTER_ADDR=10.0.0.7 MASTER_PORT=31000 ", 0), 0u);
  ScopedEnv env_port("MASTER_PORT", "32000");
  launch.master_port = 0;
  EXPECT_EQ(shell_line(*host_launch(launch)).rfind("MASTER_ADDR=10.0.0.7 MASTER_PORT=32000 ", 0),
            0u);
}

TEST(Launcher, InsideASlurmAllocationAutoUsesSrun) {
  ScopedEnv slurm("SLURM_JOB_ID", "42");
  auto c = host_launch(two_hosts());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->launcher, "slurm");
  EXPECT_NE(joined(c->argv).find("srun --nodes=2 --ntasks=4 --ntasks-per-node=2 "
                                 "--nodelist=node-a,node-b --export=ALL"),
            std::string::npos)
      << joined(c->argv);
  HostLaunch uneven = two_hosts();
  uneven.hosts[1].slots = {0};
  auto refused = host_launch(uneven);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("srun starts the same number of tasks on every node"),
            std::string::npos);
  uneven.launcher = "openmpi";  // mpirun takes any count per host
  EXPECT_TRUE(host_launch(uneven).ok());
}

TEST(Launcher, WhatCannotBeHonouredIsRefusedByName) {
  ScopedEnv slurm("SLURM_JOB_ID", nullptr);
  HostLaunch launch = two_hosts();
  launch.launcher = "slurm";
  EXPECT_NE(host_launch(launch).status().message().find("SLURM_JOB_ID is not set"),
            std::string::npos);
  launch.launcher = "pdsh";
  EXPECT_NE(host_launch(launch).status().message().find("--launcher pdsh is not offered"),
            std::string::npos);
  launch.launcher = "carrier-pigeon";
  EXPECT_EQ(host_launch(launch).status().code(), DSCORE_INVALID_ARGUMENT);
  launch = two_hosts();
  launch.hosts[1].slots = {1};  // slot 1 alone: a device choice mpirun cannot make
  EXPECT_NE(host_launch(launch).status().message().find(
                "host node-b keeps slots that are not its first 1"),
            std::string::npos);
}

TEST(Launcher, ShellLineQuotesWhatTheShellWouldSplit) {
  LaunchCommand c{"openmpi", {"mpirun", "a b", "it's"}, {{"X", "1 2"}}};
  EXPECT_EQ(shell_line(c), "X='1 2' mpirun 'a b' 'it'\\''s'");
}

}  // namespace
}  // namespace dscore::comm
