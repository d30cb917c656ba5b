// `dscore plan` through the real executable: the per-rank memory table and
// the per-step communication of each stage, before anything is allocated
// (the numbers themselves are checked against the engine's allocations in
// tests/multirank/invariants_test.cc); config errors exit 2.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

ProcessResult plan(const std::string& extra, int ranks, TempDir& dir) {
  MlpRunConfig cfg;
  cfg.extra = extra;
  const auto config = dir.write("ds_config.json", cfg.text());
  return run_dscore({"plan", "--config", config.string(), "-n", std::to_string(ranks)});
}

TEST(CliPlan, PrintsOneColumnPerRankAndTheCollectivesOfTheStage) {
  TempDir dir("dscore_cli_plan");
  ProcessResult r = plan(R"("zero_optimization": {"stage": 2}, "fp16": {"enabled": true})", 4, dir);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("ZeRO stage 2, 4 rank(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model fp16, gradients fp16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 3"), std::string::npos) << r.out;
  for (const char* row :
       {"parameters", "gradients", "master weights (fp32)", "optimizer state", "buffers", "total"})
    EXPECT_EQ(lines_starting_with(r.out, std::string("  ") + row).size(), 1u) << row << "\n"
                                                                              << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "    reduce ").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "    allgather   ").size(), 1u)
      << r.out;  // not "(step statistics)"
}

TEST(CliPlan, StageThreeReduceScattersAndStageZeroAllreduces) {
  TempDir dir("dscore_cli_plan");
  ProcessResult three = plan(R"("zero_optimization": {"stage": 3})", 2, dir);
  ASSERT_EQ(three.exit_code, 0) << three.describe();
  EXPECT_EQ(lines_starting_with(three.out, "    reduce_scatter ").size(), 1u) << three.out;
  ProcessResult zero = plan(R"("zero_optimization": {"stage": 0})", 2, dir);
  ASSERT_EQ(zero.exit_code, 0) << zero.describe();
  EXPECT_EQ(lines_starting_with(zero.out, "    allreduce ").size(), 1u) << zero.out;
}

TEST(CliPlan, NvmeOffloadShowsTileBuffersInRamAndSwapFilesOnDiskAndWhetherThisMachineFits) {
  TempDir dir("dscore_cli_plan");
  const std::string swap = (dir.path() / "swap").string();
  ProcessResult r = plan(R"("bf16": {"enabled": true}, "zero_optimization": {"stage": 2, )"
                         R"("offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                             swap + R"(", "pipeline_read": true}})",
                         2, dir);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* row :
       {"  in RAM", "  master weights (fp32)", "  offload tile buffers", "  total",
        "  disk master (fp32)", "  disk optimizer state", "  disk total"})
    EXPECT_EQ(lines_starting_with(r.out, row).size(), 1u) << row << "\n" << r.out;
  const auto master = lines_starting_with(r.out, "  master weights (fp32)");
  ASSERT_EQ(master.size(), 1u);
  EXPECT_NE(master[0].find("0 B             0 B"), std::string::npos) << "on disk instead\n"
                                                                      << r.out;
  EXPECT_NE(r.out.find("2 tile buffer(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("this machine (2 rank(s)): RAM available"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("disk free at nvme_path"), std::string::npos) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "  fits").size(), 1u) << r.out;
}

TEST(CliPlan, CpuOffloadIsCountedAndTooFewBuffersIsAConfigError) {
  TempDir dir("dscore_cli_plan");
  ProcessResult cpu =
      plan(R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}})", 1, dir);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.describe();
  EXPECT_NE(cpu.out.find("(ZeRO-Offload)"), std::string::npos) << cpu.out;
  EXPECT_EQ(lines_starting_with(cpu.out, "  offload buffers").size(), 1u) << cpu.out;
  EXPECT_EQ(cpu.out.find("disk total"), std::string::npos) << cpu.out;
  ProcessResult few =
      plan(R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", )"
           R"("nvme_path": "/tmp", "buffer_count": 1, "pipeline_write": true}})",
           1, dir);
  EXPECT_EQ(few.exit_code, 2) << few.describe();
  EXPECT_NE(few.err.find("zero_optimization.offload_optimizer.buffer_count"), std::string::npos)
      << few.err;
}

// A CUDA run's plan on a machine without a GPU: the model is made only to
// describe itself (DSCORE_CREATE_DESCRIBE_ONLY), so no GPU is needed; GPU
// memory and host memory are apart, the activations the model declares for
// its CUDA compute (with its 32 MiB cuBLAS workspace) are in GPU memory,
// and the GPU's memory is checked where one is visible, else said not to be.
TEST(CliPlan, ACudaRunIsPlannedInGpuAndHostMemory) {
  if (!std::filesystem::exists(std::string(DSCORE_BUILD_PLUGIN_DIR) +
                               "/cuda/libdscore_gpt_cuda.so"))
    GTEST_SKIP() << "this build's gpt plugin has no CUDA module";
  TempDir dir("dscore_cli_plan");
  const auto config = dir.write("ds_config.json", R"({
  "device": "cuda", "comm": {"backend": "nccl"}, "train_batch_size": 8,
  "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
  "model": {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
            "vocab_size": 256}})");
  ProcessResult r = run_dscore({"plan", "--config", config.string(), "-n", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* row : {"  in GPU memory", "  total (GPU)", "  in host memory",
                          "  offload buffers", "  total (host, peak)"})
    EXPECT_EQ(lines_starting_with(r.out, row).size(), 1u) << row << "\n" << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "  in RAM").size(), 0u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "  comm scratch").size(), 0u) << "nccl's: not counted\n"
                                                                     << r.out;
  const size_t gpu = r.out.find("  in GPU memory"), host = r.out.find("  in host memory"),
               activations = r.out.find("  activations (declared)");
  ASSERT_NE(activations, std::string::npos) << r.out;
  EXPECT_TRUE(gpu < activations && activations < host) << r.out;
  EXPECT_NE(r.out.find("MiB", activations), std::string::npos) << r.out;
  const double mib = std::stod(r.out.substr(activations + 24, 16));
  EXPECT_GT(mib, 32.0) << r.out;
  EXPECT_LT(mib, 40.0) << r.out;
  EXPECT_EQ(r.out.find("activations are not counted"), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.find("GPU memory not checked") != std::string::npos ||
              r.out.find("GPU memory free") != std::string::npos)
      << r.out;
}

TEST(CliPlan, ConfigErrorsAreExitTwoWithTheirPath) {
  TempDir dir("dscore_cli_plan");
  ProcessResult r = plan(R"("zero_optimization": {"stage": 5})", 2, dir);
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("zero_optimization.stage"), std::string::npos) << r.err;
  TempDir other("dscore_cli_plan");
  ProcessResult bad = run_dscore({"plan", "--config", (other.path() / "missing.json").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
}

// --inference plans generation's engine: the same model without optimizer
// state, at stage 0, or stage 3 with the parameters offloaded
// (ZeRO-Inference), and the KV cache of a token model.
TEST(CliPlan, InferencePlansGenerationsEngineAndTheKvCache) {
  TempDir dir("dscore_cli_plan");
  const auto config = dir.write("llama.json", R"({"train_batch_size": 4,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 2},
      "model": {"type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "block_size": 16}})");
  ProcessResult training = run_dscore({"plan", "--config", config.string()});
  ASSERT_EQ(training.exit_code, 0) << training.describe();
  EXPECT_NE(training.out.find("ZeRO stage 2"), std::string::npos) << training.out;
  ProcessResult r = run_dscore({"plan", "--config", config.string(), "--inference"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("ZeRO stage 0, 1 rank(s)"), std::string::npos) << r.out;
  const auto state = lines_starting_with(r.out, "  optimizer state");
  ASSERT_EQ(state.size(), 1u) << r.out;
  EXPECT_NE(state[0].find(" 0 B"), std::string::npos) << state[0];
  // 2 layers x 16 positions x 2 heads x 8 x (keys + values) x 4 B = 4 KiB.
  EXPECT_NE(r.out.find("KV cache 4.00 KiB per sequence of 16 tokens"), std::string::npos) << r.out;
  ProcessResult offloaded =
      run_dscore({"plan", "--config", config.string(), "--inference", "--offload-param", "cpu"});
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.describe();
  EXPECT_NE(offloaded.out.find("ZeRO stage 3"), std::string::npos) << offloaded.out;
  EXPECT_NE(offloaded.out.find("parameters: host"), std::string::npos) << offloaded.out;
}

}  // namespace
}  // namespace dscore::testing
