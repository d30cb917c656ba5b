// Tests for core/engine/engine_checkpoint.cc: checkpoints saved and loaded
// by in-process jobs (tests/fakes/in_process_job.h; ranks as threads on the
// loopback backend): an exact resume at the same world size and stage, a
// re-partitioned resume at another world size and stage, and a damaged file
// refused with a message naming it; and a save in the middle of an
// accumulation cycle refused, on one engine driven directly. The mpirun
// versions, with crashes and the full matrix, are
// tests/multirank/checkpoint_test.cc and checkpoint_files_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/engine/initialize.h"
#include "tests/core/engine/quadratic_model.h"
#include "tests/fakes/in_process_job.h"
#include "tests/fakes/temp_dir.h"

namespace dscore {
namespace {

namespace fs = std::filesystem;
using testing::InProcessHooks;
using testing::InProcessResult;
using testing::run_in_process_job;

std::string config(int stage) {
  return R"("train_batch_size": 12, "train_steps": 6, "seed": 5,
  "optimizer": {"type": "Adam", "params": {"lr": 0.002}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 0.002, "warmup_num_steps": 2, "total_num_steps": 6}},
  "model": {"type": "mlp", "hidden_dim": 20, "n_hidden_layers": 2},
  "zero_optimization": {"stage": )" +
         std::to_string(stage) + "}";
}

class CheckpointInProcess : public ::testing::Test {
 protected:
  // The uninterrupted run, saving after its third step.
  InProcessResult save_after_step_2(int stage, int world) {
    InProcessHooks save;
    save.after_each_step = [this](Engine& e, int64_t step) {
      return step == 2 ? e.save_checkpoint(dir_.path().string()) : Status::Ok();
    };
    return run_in_process_job(config(stage), world, save);
  }
  InProcessResult resume(int stage, int world) {
    InProcessHooks load;
    load.before_training = [this](Engine& e) {
      return e.load_checkpoint(dir_.path().string()).status();
    };
    return run_in_process_job(config(stage), world, load);
  }

  testing::TempDir dir_{"dscore_ckpt_in_process"};
};

TEST_F(CheckpointInProcess, ResumeAtTheSameWorldAndStageIsExact) {
  const InProcessResult full = save_after_step_2(2, 2);
  ASSERT_EQ(full.error, "");
  const InProcessResult resumed = resume(2, 2);
  ASSERT_EQ(resumed.error, "");
  ASSERT_EQ(resumed.losses.size(), 3u);  // steps 3, 4, 5
  EXPECT_EQ(resumed.losses, std::vector<double>(full.losses.begin() + 3, full.losses.end()));
  EXPECT_EQ(resumed.params, full.params);
}

TEST_F(CheckpointInProcess, AnotherWorldSizeAndStageResumesWithinTolerance) {
  const InProcessResult full = save_after_step_2(1, 2);
  ASSERT_EQ(full.error, "");
  const InProcessResult resumed = resume(3, 3);
  ASSERT_EQ(resumed.error, "");
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(resumed.losses[i], full.losses[i + 3], 1e-4 * std::fabs(full.losses[i + 3]));
  ASSERT_EQ(resumed.params.size(), full.params.size());
  for (size_t i = 0; i < full.params.size(); ++i)
    EXPECT_NEAR(resumed.params[i], full.params[i], 1e-4 * std::fabs(full.params[i]) + 1e-6) << i;
}

TEST_F(CheckpointInProcess, ADamagedFileIsRefusedNamingIt) {
  ASSERT_EQ(save_after_step_2(0, 1).error, "");
  fs::path victim;
  // The optimizer shard holds the fp32 master a resume reads.
  for (const auto& entry : fs::recursive_directory_iterator(dir_.path()))
    if (entry.path().filename().string().find("optim_states") != std::string::npos)
      victim = entry.path();
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-16, std::ios::end);
    f.write("corrupted bytes!", 16);
  }
  const InProcessResult resumed = resume(0, 1);
  EXPECT_NE(resumed.error.find(victim.filename().string()), std::string::npos) << resumed.error;
}

// A save (or load) must come at an accumulation boundary: mid-cycle the
// gradients of the micro-steps so far would be lost or double-counted.
TEST(EngineCheckpoint, ASaveInTheMiddleOfAnAccumulationCycleIsRefused) {
  const std::string text = std::string(R"({"plugins": {"paths": [")") + DSCORE_BUILD_PLUGIN_DIR +
                           R"(", ")" + DSCORE_TEST_PLUGIN_DIR + R"(/fake_sgd"]},
      "train_batch_size": 2, "train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "fake_sgd", "params": {"lr": 0.1}}})";
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  options.own_model = true;
  auto setup = prepare_text(text, "t.json", ".", options);
  ASSERT_TRUE(setup.ok() && setup->loaded.ok()) << format_config_errors(setup->loaded);
  auto engine = build_engine(*setup, std::make_unique<testing::QuadraticModel>(
                                         std::vector<float>{0, 0}, std::vector<float>{3, 4}));
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const dscore_batch batch = {sizeof(dscore_batch), 1, 0, nullptr};
  ASSERT_TRUE((*engine)->forward_backward(batch).ok());
  ASSERT_TRUE((*engine)->step().ok());  // micro step 1 of 2
  testing::TempDir dir;
  const Status saved = (*engine)->save_checkpoint(dir.path().string());
  EXPECT_EQ(saved.code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_NE(saved.message().find("micro step 1 of 2"), std::string::npos) << saved.message();
  EXPECT_TRUE(fs::is_empty(dir.path()));  // nothing written
  ASSERT_TRUE((*engine)->forward_backward(batch).ok());
  ASSERT_TRUE((*engine)->step().ok());  // the boundary: now it saves
  EXPECT_TRUE((*engine)->save_checkpoint(dir.path().string()).ok());
}

}  // namespace
}  // namespace dscore
