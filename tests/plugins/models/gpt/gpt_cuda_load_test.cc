// A CUDA build's gpt plugin without a GPU (not labelled `gpu`: it runs
// everywhere): the library loads (cudart is static; no driver needed) and
// "device": "cuda" fails at create with an error that says why and what to
// do. On a machine with a GPU the second test skips: gpt_cuda_test covers it.
#include <cuda_runtime_api.h>
#include <dscore/model.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/fakes/fake_host.h"

namespace {

namespace fakes = dscore::testing;

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(GptCudaLoad, PluginLoadsAndOffersTheCudaDevice) {
  fakes::TestPluginLibrary lib(DSCORE_GPT_PLUGIN);
  const dscore_plugin_descriptor* d = lib.find(DSCORE_KIND_MODEL, "gpt");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(std::string(d->params_schema).find("\"cuda\""), std::string::npos);
}

TEST(GptCudaLoad, CudaDeviceWithoutGpuIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is visible: gpt_cuda_test runs the cuda path";
  fakes::TestPluginLibrary lib(DSCORE_GPT_PLUGIN);
  const auto* vt = lib.vtable<dscore_model_vtable>(DSCORE_KIND_MODEL, "gpt");
  fakes::CreateArgs args = fakes::CreateArgs::with_defaults(lib.find(DSCORE_KIND_MODEL, "gpt"));
  args.integer("n_layer", 1).integer("n_head", 2).integer("n_embd", 16).integer("block_size", 8);
  args.integer("vocab_size", 32).string("device", "cuda");
  dscore_model* model = nullptr;
  EXPECT_EQ(vt->create(args.get(), &model), DSCORE_UNAVAILABLE);
  EXPECT_EQ(model, nullptr);
  const std::string error = fakes::FakeHost::instance().last_error();
  EXPECT_NE(error.find("\"device\": \"cuda\" but no CUDA device is visible"), std::string::npos)
      << error;
  EXPECT_NE(error.find("\"device\": \"cpu\""), std::string::npos) << error;
}

}  // namespace
