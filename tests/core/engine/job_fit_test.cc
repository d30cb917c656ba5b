// check_job_fits, the engine's check before it allocates anything, against
// this machine: offload settings the plan cannot count on are invalid
// arguments; a model far beyond any machine's RAM, or swap files far beyond
// any disk, are refused with the numbers; a small model fits.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/engine/job_fit.h"

namespace dscore {
namespace {

// One layer holding one parameter of `numel` elements (nothing allocated).
class OneParameter {
 public:
  explicit OneParameter(int64_t numel) : shape_{numel}, param_{} {
    param_ = {sizeof(dscore_model_param), "w", 1, shape_, numel, 0, 0, 0, 0, 0};
    layout_ = ParamLayout::from_description(description_).value();
  }
  const ParamLayout& layout() const { return layout_; }

 private:
  int64_t shape_[1];
  dscore_model_param param_;
  const dscore_model_param* params_[1] = {&param_};
  dscore_model_layer layer_{sizeof(dscore_model_layer), "l", 1, params_};
  const dscore_model_layer* layers_[1] = {&layer_};
  dscore_model_description description_{
      sizeof(dscore_model_description), 1, layers_, 0, nullptr, 0, 0, nullptr};
  ParamLayout layout_;
};

config::TrainingConfig load(const std::string& zero) {
  config::LoadedConfig loaded = config::load_config_text(
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": )" + zero + "}", "t.json",
      config::ResolveContext{});
  EXPECT_TRUE(loaded.ok()) << (loaded.errors.empty() ? "" : loaded.errors.front().message);
  return *loaded.config;
}

const std::vector<zero::StateSlot> kAdam = {{"exp_avg", DSCORE_DTYPE_F32, 1},
                                            {"exp_avg_sq", DSCORE_DTYPE_F32, 1}};

std::string nvme(const std::string& extra = "") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "dscore_planner_test" / "not_yet").string();
  return R"({"stage": 3, "sub_group_size": 1024, "offload_optimizer": {"device": "nvme", )"
         R"("nvme_path": ")" +
         path + "\"" + extra + "}}";
}

TEST(CheckJobFits, ASmallModelFits) {
  OneParameter model(4096);
  EXPECT_TRUE(check_job_fits(load(R"({"stage": 1})"), model.layout(), kAdam, comm::JobEnv{}).ok());
  EXPECT_TRUE(check_job_fits(load(nvme()), model.layout(), kAdam, comm::JobEnv{}).ok());
}

TEST(CheckJobFits, ReadsThisMachinesRamAndTheDiskAboveAMissingNvmePath) {
  OneParameter model(4096);
  const zero::ZeroPlan plan = zero::make_plan(load(nvme()), model.layout(), kAdam, 1, 0);
  const zero::NodeCapacity node = read_node_capacity(plan, 3);
  EXPECT_EQ(node.local_ranks, 3);
  ASSERT_TRUE(node.ram_available.has_value());
  EXPECT_GT(*node.ram_available, 0);
  ASSERT_TRUE(node.disk_available.has_value()) << "the nearest existing folder's file system";
  EXPECT_GT(*node.disk_available, 0);
  EXPECT_FALSE(
      read_node_capacity(zero::make_plan(load(R"({"stage": 1})"), model.layout(), kAdam, 1, 0), 1)
          .disk_available.has_value());
}

TEST(CheckJobFits, TooFewBuffersIsAnInvalidArgumentNamingBufferCount) {
  OneParameter model(4096);
  const Status s = check_job_fits(load(nvme(R"(, "buffer_count": 1, "pipeline_read": true)")),
                                  model.layout(), kAdam, comm::JobEnv{});
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("offload_optimizer.buffer_count"), std::string::npos) << s.message();
}

TEST(CheckJobFits, RefusesAModelBeyondThisMachinesRam) {
  OneParameter model(int64_t{1} << 45);  // 32 Ti parameters
  comm::JobEnv job;
  job.world_size = 2;  // both on this node
  const Status s = check_job_fits(load(R"({"stage": 2})"), model.layout(), kAdam, job);
  EXPECT_EQ(s.code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(s.message().find("for the 2 ranks on this node"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("MemAvailable"), std::string::npos) << s.message();
}

TEST(CheckJobFits, RefusesSwapFilesBeyondTheDisk) {
  // 32 Mi parameters in RAM (under 1 GiB with the tile buffer), a slot of
  // 2^16 elements per parameter on disk (8 TiB).
  OneParameter model(int64_t{1} << 25);
  const std::vector<zero::StateSlot> wide = {{"wide", DSCORE_DTYPE_F32, 1u << 16}};
  const Status s = check_job_fits(load(nvme()), model.layout(), wide, comm::JobEnv{});
  EXPECT_EQ(s.code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_NE(s.message().find("disk: the swap files need 8.00 TiB"), std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("RAM:"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dscore
