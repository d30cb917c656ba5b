// Tests for core/config/run_rules.cc: what the engine refuses before it
// allocates anything, with a message naming the key and the fix: here
// "device": "cuda", which is opt-in (DSCORE_EXPERIMENTAL_CUDA_ENGINE=1,
// RunOptions) until the CUDA path has run on a GPU, and which then needs
// the nccl backend and no offload.
#include "core/config/run_rules.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dscore {
namespace {

std::vector<config::ConfigError> refused(const config::TrainingConfig& cfg, bool opt_in) {
  return config::run_errors(cfg, config::RunOptions{opt_in});
}

// An NVMe section as the schema fills it: a folder and DeepSpeed's buffers.
config::OffloadConfig nvme() {
  config::OffloadConfig o;
  o.device = config::OffloadDevice::kNvme;
  o.nvme_path = "/local_nvme";
  o.buffer_count = 4;
  return o;
}

TEST(UnsupportedFeatures, CudaIsRefusedWithoutTheOptInAndSaysHowToTryIt) {
  config::TrainingConfig cfg;
  cfg.device = "cuda";
  cfg.comm.backend = "nccl";
  const auto errors = refused(cfg, false);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "device");
  EXPECT_NE(errors[0].message.find("DSCORE_EXPERIMENTAL_CUDA_ENGINE=1"), std::string::npos);
  EXPECT_NE(errors[0].message.find("\"device\": \"cpu\""), std::string::npos);
}

// ZeRO-Offload to host memory runs from the GPU (host_offload_state.h) at
// stages 1-3; NVMe and parameter offload from the GPU are refused by key.
TEST(UnsupportedFeatures, CudaWithTheOptInNeedsNcclAndOffloadsOnlyTheOptimizerToTheHost) {
  config::TrainingConfig cfg;
  cfg.device = "cuda";
  cfg.comm.backend = "nccl";
  EXPECT_TRUE(refused(cfg, true).empty());

  cfg.comm.backend = "mpi";
  auto errors = refused(cfg, true);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "comm.backend");
  EXPECT_NE(errors[0].message.find("\"backend\": \"nccl\""), std::string::npos);

  cfg.comm.backend = "nccl";
  cfg.zero.stage = 2;
  cfg.zero.offload_optimizer = config::OffloadConfig{};
  cfg.zero.offload_optimizer->device = config::OffloadDevice::kCpu;
  EXPECT_TRUE(refused(cfg, true).empty());

  cfg.zero.stage = 0;
  errors = refused(cfg, true);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "zero_optimization.offload_optimizer.device");
  EXPECT_NE(errors[0].message.find("stage 1, 2 or 3"), std::string::npos) << errors[0].message;

  // NVMe from the GPU: the optimizer state and stage 3's parameters.
  cfg.zero.stage = 3;
  cfg.bf16.enabled = true;
  cfg.zero.offload_optimizer = nvme();
  cfg.zero.offload_param = nvme();
  EXPECT_TRUE(refused(cfg, true).empty());

  // Parameters in host memory too; either only with the optimizer state
  // off the GPU (the host update writes them).
  cfg.zero.offload_param->device = config::OffloadDevice::kCpu;
  EXPECT_TRUE(refused(cfg, true).empty());
  cfg.zero.offload_optimizer->device = config::OffloadDevice::kNone;
  for (config::OffloadDevice params : {config::OffloadDevice::kCpu, config::OffloadDevice::kNvme}) {
    cfg.zero.offload_param->device = params;
    errors = refused(cfg, true);
    ASSERT_EQ(errors.size(), 1u) << config::offload_device_name(params);
    EXPECT_EQ(errors[0].path, "zero_optimization.offload_param.device");
    EXPECT_NE(errors[0].message.find("offload_optimizer.device to \"cpu\" or \"nvme\""),
              std::string::npos)
        << errors[0].message;
  }
}

TEST(UnsupportedFeatures, TheCpuIsNotAffectedByTheOptIn) {
  config::TrainingConfig cfg;
  cfg.device = "cpu";
  cfg.comm.backend = "loopback";
  EXPECT_TRUE(refused(cfg, false).empty());
  EXPECT_TRUE(refused(cfg, true).empty());
}

}  // namespace
}  // namespace dscore
