// A CUDA build's gpt plugin on any machine (not labelled `gpu`: it runs
// everywhere): the library loads without CUDA libraries (it links none; the
// CUDA compute is the module libdscore_gpt_cuda.so), a CPU model loads no
// cuBLAS, "device": "cuda" without the module fails naming the module's
// path, and with the module but without a GPU fails saying why and what to
// do. On a machine with a GPU that last test skips: gpt_cuda_test covers it.
#include <dscore/model.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/fakes/fake_host.h"
#include "tests/plugins/models/transformer_common/cuda_load_checks.h"

namespace dscore::transformer::testing {
namespace {

void tiny(fakes::CreateArgs& args) {
  args.integer("n_layer", 1).integer("n_head", 2).integer("n_embd", 16).integer("block_size", 8);
  args.integer("vocab_size", 32);
}

TEST(GptCudaLoad, PluginLoadsAndOffersTheCudaDevice) {
  fakes::TestPluginLibrary lib(DSCORE_GPT_PLUGIN);
  const dscore_plugin_descriptor* d = lib.find(DSCORE_KIND_MODEL, "gpt");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(std::string(d->params_schema).find("\"cuda\""), std::string::npos);
}

TEST(GptCudaLoad, CpuModelLoadsNoCublas) {
  expect_cpu_model_loads_no_cublas(DSCORE_GPT_PLUGIN, "gpt", tiny);
}

TEST(GptCudaLoad, CudaDeviceWithoutTheModuleNamesIt) {
  expect_missing_module_error(DSCORE_GPT_PLUGIN, "gpt", "libdscore_gpt_cuda.so", tiny);
}

TEST(GptCudaLoad, CudaDeviceWithoutGpuIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is visible: gpt_cuda_test runs the cuda path";
  expect_no_device_error(DSCORE_GPT_PLUGIN, "gpt", tiny);
}

TEST(GptCudaLoad, ADescribeOnlyCudaModelNeedsNoGpu) {
  expect_describe_only_model_needs_no_gpu(DSCORE_GPT_PLUGIN, "gpt", tiny, 8);
}

}  // namespace
}  // namespace dscore::transformer::testing
