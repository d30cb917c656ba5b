// The nccl comm plugin where no GPU is usable (every machine: this test
// hides the GPUs with CUDA_VISIBLE_DEVICES=""): its library loads, so
// `dscore plugins list` shows it, and creating it fails with
// FAILED_PRECONDITION naming CUDA and the way out (a GPU machine, or the
// mpi backend), never a crash.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/core/cli/process.h"
#include "tests/plugins/comm/nccl/device_comm.h"

namespace dscore::testing {
namespace {

TEST(NcclPluginWithoutGpu, IsListedByDscorePluginsList) {
  ProcessResult r = run_dscore({"plugins", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  bool listed = false;
  for (const std::string& line : lines_starting_with(r.out, "comm"))
    listed = listed || (line.find(" nccl ") != std::string::npos &&
                        line.find("libdscore_comm_nccl.so") != std::string::npos);
  EXPECT_TRUE(listed) << r.out;
}

TEST(NcclPluginWithoutGpu, CreateFailsNamingCudaAndTheFix) {
  // Before this process's first CUDA call: the runtime reads it once.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  auto registry = plugin_host::PluginRegistry::open({{DSCORE_BUILD_PLUGIN_DIR}, {true}, {"test"}});
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  auto info = (*registry)->find(DSCORE_KIND_COMM, "nccl");
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_NE((*info)->capabilities & DSCORE_CAP_CUDA, 0u);
  EXPECT_NE((*info)->capabilities & DSCORE_CAP_MULTI_RANK, 0u);
  EXPECT_EQ((*info)->capabilities & DSCORE_CAP_CPU, 0u);
  auto instance = create_nccl(**registry, NcclJob{});
  ASSERT_FALSE(instance.ok());
  const std::string& message = instance.status().message();
  EXPECT_EQ(instance.status().code(), DSCORE_FAILED_PRECONDITION) << message;
  EXPECT_NE(message.find("no CUDA device"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << message;
  EXPECT_NE(message.find("\"backend\": \"mpi\""), std::string::npos) << message;
}

}  // namespace
}  // namespace dscore::testing
