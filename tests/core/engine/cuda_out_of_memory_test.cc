// A GPU too small for a micro-batch's activations: the engine's fit check
// passes (it counts the model states and buffers on the GPU, not the
// activations), then the model's allocation fails in the first step. The
// run ends with the model's error naming the GPU memory and the settings
// that lower it, not a crash or a hang, and a smaller micro-batch on the
// same GPU trains. The emulated GPU has DSCORE_CUDA_EMULATION_MEMORY bytes
// (tests/cuda_emulation), so built in the `emulated` preset only; label gpu.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/fakes/in_process_job.h"

namespace dscore {
namespace {

using testing::InProcessResult;
using testing::run_in_process_job;

// About 60 MB: the model's cuBLAS workspace (32 MiB), its states and a
// micro-batch of 8 fit; one of 64 (a 4 MiB block of logits among its
// activations) does not.
constexpr const char* kGpuBytes = "60000000";

std::string config(int micro, const std::string& corpus) {
  return R"("device": "cuda", "train_batch_size": )" + std::to_string(micro) +
         R"(, "train_micro_batch_size_per_gpu": )" + std::to_string(micro) +
         R"(, "train_steps": 2, "seed": 3,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "model": {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64,
            "vocab_size": 256},
  "data": {"type": "text", "path": ")" +
         corpus + R"("})";
}

class CudaOutOfMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) GTEST_SKIP() << "no emulated GPU";
    ::setenv("DSCORE_EXPERIMENTAL_CUDA_ENGINE", "1", 1);
    ::setenv("DSCORE_CUDA_EMULATION_MEMORY", kGpuBytes, 1);
    corpus_ = (std::filesystem::temp_directory_path() /
               ("dscore_cuda_oom_corpus." + std::to_string(::getpid())))
                  .string();
    std::ofstream out(corpus_);
    for (int i = 0; i < 400; ++i)
      out << "the quick brown fox jumps over the lazy dog " << i << ". ";
  }
  void TearDown() override {
    ::unsetenv("DSCORE_EXPERIMENTAL_CUDA_ENGINE");
    ::unsetenv("DSCORE_CUDA_EMULATION_MEMORY");
    if (!corpus_.empty()) std::filesystem::remove(corpus_);
  }
  std::string corpus_;
};

TEST_F(CudaOutOfMemory, AMicroBatchTooLargeForTheGpuIsAnErrorNamingTheFix) {
  const InProcessResult big = run_in_process_job(config(64, corpus_), 1, {}, "nccl");
  ASSERT_NE(big.error, "") << "a micro-batch of 64 trained in " << kGpuBytes << " bytes";
  for (const char* part : {"out of GPU memory allocating", "of activations on device 0", "free of",
                           "lower train_micro_batch_size_per_gpu", "activation_checkpointing"})
    EXPECT_NE(big.error.find(part), std::string::npos) << part << "\n" << big.error;
  const InProcessResult small = run_in_process_job(config(8, corpus_), 1, {}, "nccl");
  ASSERT_EQ(small.error, "");
  EXPECT_EQ(small.losses.size(), 2u);
}

}  // namespace
}  // namespace dscore
