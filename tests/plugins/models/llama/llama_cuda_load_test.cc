// A CUDA build's llama plugin on any machine (not labelled `gpu`: it runs
// everywhere): a CPU model loads no cuBLAS (the plugin links none; the CUDA
// compute is the module libdscore_llama_cuda.so), "device": "cuda" without
// the module fails naming the module's path, and with the module but
// without a GPU fails saying why. With a GPU the last test skips:
// llama_cuda_test covers the CUDA path.
#include <gtest/gtest.h>

#include "tests/plugins/models/transformer_common/cuda_load_checks.h"

namespace dscore::transformer::testing {
namespace {

void tiny(fakes::CreateArgs& args) {
  args.integer("vocab_size", 32).integer("hidden_size", 16).integer("intermediate_size", 24);
  args.integer("num_hidden_layers", 1).integer("num_attention_heads", 2);
  args.integer("max_position_embeddings", 8);
}

TEST(LlamaCudaLoad, CpuModelLoadsNoCublas) {
  expect_cpu_model_loads_no_cublas(DSCORE_LLAMA_PLUGIN, "llama", tiny);
}

TEST(LlamaCudaLoad, CudaDeviceWithoutTheModuleNamesIt) {
  expect_missing_module_error(DSCORE_LLAMA_PLUGIN, "llama", "libdscore_llama_cuda.so", tiny);
}

TEST(LlamaCudaLoad, CudaDeviceWithoutGpuIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is visible: llama_cuda_test runs the cuda path";
  expect_no_device_error(DSCORE_LLAMA_PLUGIN, "llama", tiny);
}

TEST(LlamaCudaLoad, ADescribeOnlyCudaModelNeedsNoGpu) {
  expect_describe_only_model_needs_no_gpu(DSCORE_LLAMA_PLUGIN, "llama", tiny, 8);
}

}  // namespace
}  // namespace dscore::transformer::testing
