// Loading a model's CUDA module (plugins/models/transformer_common/cuda_module.h)
// with fake modules built beside this test: a module that is not there, one
// whose cuBLAS is missing, one without the factory, a factory that fails,
// one built for other types, and one that works and whose Compute throws
// across the module boundary. Each failure is an sdk::Error naming the
// model, the module's path, dlerror()'s text and the fix.
#include "plugins/models/transformer_common/cuda_module.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/plugins/models/transformer_common/fake_cuda_module.h"

namespace dscore::transformer {
namespace {

using testing::FakeConfig;
using testing::FakeParams;

constexpr char kSymbol[] = "dscore_fake_cuda_make_compute";

// The message of the sdk::Error that body throws.
template <class Body>
std::string error_of(Body&& body, dscore_status expected) {
  try {
    body();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no sdk::Error thrown";
  return "";
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in: " << text;
}

CudaModuleRequest request_for(const FakeConfig& config, const FakeParams& params) {
  CudaModuleRequest r;
  r.config_size = sizeof config;
  r.params_size = sizeof params;
  r.config = &config;
  r.params = &params;
  return r;
}

TEST(CudaModule, PathIsInTheCudaFolderBesideTheLoadingObject) {
  const std::string path = cuda_module_path("libdscore_x_cuda.so");
  EXPECT_EQ(path.substr(path.size() - 25), "/cuda/libdscore_x_cuda.so") << path;
}

TEST(CudaModule, AMissingModuleNamesItsPathAndTheInstall) {
  const std::string path = std::string(DSCORE_FAKE_MODULE_DIR) + "/not-built/libdscore_gpt_cuda.so";
  const std::string e =
      error_of([&] { load_cuda_module("gpt", path, kSymbol); }, DSCORE_UNAVAILABLE);
  expect_has(e, "gpt: \"device\": \"cuda\" needs the CUDA module " + path);
  expect_has(e, "cannot open shared object file");  // dlerror()
  expect_has(e, "missing from this install");
  expect_has(e, "\"device\": \"cpu\"");
}

TEST(CudaModule, AMissingCublasSaysWhereToFindIt) {
  const std::string e =
      error_of([&] { load_cuda_module("llama", DSCORE_FAKE_MODULE_NO_CUBLAS, kSymbol); },
               DSCORE_UNAVAILABLE);
  expect_has(e, std::string("the CUDA module ") + DSCORE_FAKE_MODULE_NO_CUBLAS);
  expect_has(e, "libcublas.so.99: cannot open shared object file");  // dlerror()
  expect_has(e, "LD_LIBRARY_PATH");
  expect_has(e, "nvidia/cublas/lib");
}

TEST(CudaModule, AModuleWithoutTheFactoryIsNotThisPluginsModule) {
  const std::string e =
      error_of([&] { load_cuda_module("gpt", DSCORE_FAKE_MODULE, "dscore_gpt_cuda_make_compute"); },
               DSCORE_UNAVAILABLE);
  expect_has(e, "has no dscore_gpt_cuda_make_compute");
  expect_has(e, "from one build");
}

TEST(CudaModule, FactoryMakesAComputeWhoseExceptionsReachTheCaller) {
  const CudaComputeFactory factory = load_cuda_module("fake", DSCORE_FAKE_MODULE, kSymbol);
  EXPECT_EQ(factory, load_cuda_module("fake", DSCORE_FAKE_MODULE, kSymbol));  // loaded once
  FakeConfig config;
  config.value = 7;
  FakeParams params;
  std::unique_ptr<Compute> compute = call_cuda_module(factory, request_for(config, params));
  const SplitTokens tokens{};
  const dscore_model_hooks hooks{};
  EXPECT_EQ(compute->forward_backward(tokens, hooks, 1.0), 7.0);
  const std::string e =
      error_of([&] { compute->forward(tokens, hooks, nullptr, nullptr); }, DSCORE_DATA_LOSS);
  EXPECT_EQ(e, "thrown in the module");
}

TEST(CudaModule, AFactoryFailureIsThrownWithItsStatus) {
  const CudaComputeFactory factory = load_cuda_module("fake", DSCORE_FAKE_MODULE, kSymbol);
  FakeConfig config;
  config.value = -1;
  FakeParams params;
  const std::string e =
      error_of([&] { call_cuda_module(factory, request_for(config, params)); }, DSCORE_UNAVAILABLE);
  EXPECT_EQ(e, "no device here");
}

TEST(CudaModule, AModuleBuiltForOtherTypesRefuses) {
  const CudaComputeFactory factory = load_cuda_module("fake", DSCORE_FAKE_MODULE, kSymbol);
  FakeConfig config;
  FakeParams params;
  CudaModuleRequest request = request_for(config, params);
  request.config_size += 8;
  const std::string e =
      error_of([&] { call_cuda_module(factory, request); }, DSCORE_FAILED_PRECONDITION);
  expect_has(e, "fake: the CUDA module was built from other sources than the plugin");
  request = request_for(config, params);
  request.abi = kCudaModuleAbi + 1;
  error_of([&] { call_cuda_module(factory, request); }, DSCORE_FAILED_PRECONDITION);
}

}  // namespace
}  // namespace dscore::transformer
