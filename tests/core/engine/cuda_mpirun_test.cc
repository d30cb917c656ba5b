// `dscore run` on "device": "cuda" under mpirun: two processes, one GPU
// each (local rank), the nccl backend's unique id through the job's
// key-value store at MASTER_ADDR:MASTER_PORT, ZeRO-2's reductions on the
// comm stream, against the same job on the CPU (`dscore run -n 2`). The
// model's device follows the run's. Label `gpu`: skips with fewer than two
// GPUs or without mpirun.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/comm/tcp_kv.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

int cuda_devices() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::string job_config(const std::string& device, const std::string& corpus,
                       const std::string& checkpoints) {
  const std::string cuda =
      device == "cuda" ? R"("device": "cuda", "comm": {"backend": "nccl"},)" : "";
  return "{" + cuda + R"(
  "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
  "train_steps": 3, "seed": 5, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 2000},
  "model": {"type": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16,
            "vocab_size": 256},
  "data": {"type": "text", "path": ")" +
         corpus + R"("},
  "checkpoint_dir": ")" +
         checkpoints + R"(", "save_interval": 3})";
}

// The job's final loss from its "done:" line ("" when there is none).
std::string final_loss(const std::string& out) {
  const auto at = out.find("final loss ");
  if (at == std::string::npos) return "";
  return out.substr(at + 11, out.find_first_of(", \n", at + 11) - at - 11);
}

TEST(CudaMpirun, TrainsAsTheCpuRanksDo) {
  if (access(MPIRUN, X_OK) != 0) GTEST_SKIP() << MPIRUN << " is not on this machine";
  if (cuda_devices() < 2) GTEST_SKIP() << "fewer than two GPUs: two ranks need two";
  TempDir dir("dscore_cuda_mpirun");
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "a small corpus for two ranks, line " + std::to_string(i) + ". ";
  const std::string corpus = dir.write("corpus.txt", text).string();
  const auto cpu_config =
      dir.write("cpu.json", job_config("cpu", corpus, (dir.path() / "cpu").string()));
  const auto cuda_config =
      dir.write("cuda.json", job_config("cuda", corpus, (dir.path() / "cuda").string()));

  ProcessResult cpu = run_dscore({"run", "-n", "2", "--config", cpu_config.string()});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.describe();

  Result<int> port = comm::pick_free_port();
  ASSERT_TRUE(port.ok()) << port.status().message();
  std::vector<std::string> argv = {MPIRUN,
                                   "-n",
                                   "2",
                                   "--bind-to",
                                   "none",
                                   "-x",
                                   "MASTER_ADDR=127.0.0.1",
                                   "-x",
                                   "MASTER_PORT=" + std::to_string(*port),
                                   "-x",
                                   "DSCORE_EXPERIMENTAL_CUDA_ENGINE=1"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const char* name : {"DSCORE_CUDA_EMULATION_DEVICES", "LD_LIBRARY_PATH"})
    if (std::getenv(name) != nullptr) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), {DSCORE_EXE, "run", "--config", cuda_config.string()});
  ProcessOptions options;
  options.env = mpi_test_env();
  options.timeout = std::chrono::seconds(300);
  ProcessResult cuda = run_process(argv, options);
  ASSERT_EQ(cuda.exit_code, 0) << cuda.describe();
  EXPECT_NE(cuda.err.find("model.device: cuda, the run's \"device\""), std::string::npos)
      << cuda.describe();

  const std::string expected = final_loss(cpu.out), got = final_loss(cuda.out);
  ASSERT_FALSE(expected.empty()) << cpu.describe();
  ASSERT_FALSE(got.empty()) << cuda.describe();
  std::printf("  final loss: CUDA %s, CPU %s\n", got.c_str(), expected.c_str());
  EXPECT_NEAR(std::stod(got), std::stod(expected), 1e-4 * std::stod(expected))
      << "CUDA " << got << ", CPU " << expected;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "cuda" / "latest")) << "no checkpoint saved";
}

}  // namespace
}  // namespace dscore::testing
