// A stand-in for a model's CUDA module (plugins/models/transformer_common/cuda_module.h),
// built as its own shared module by this folder's CMakeLists: its factory
// serves a request for the config type FakeConfig, and its Compute throws
// sdk::Error from forward(), to show that an exception thrown in a module
// reaches the plugin's handler. Built a second time linked against a
// library that is absent when it loads (a missing cuBLAS).
#include <dscore/cpp/plugin.hpp>

#include <memory>

#include "plugins/models/transformer_common/cuda_module.h"
#include "tests/plugins/models/transformer_common/fake_cuda_module.h"

#ifdef DSCORE_FAKE_NEEDS_ABSENT_LIBRARY
// A reference that makes the absent library a dependency (DT_NEEDED).
extern "C" int dscore_fake_absent_library_symbol();
[[gnu::used]] static int (*const needs_absent_library)() = &dscore_fake_absent_library_symbol;
#endif

namespace dscore::transformer::testing {
namespace {

class ThrowingCompute final : public Compute {
 public:
  explicit ThrowingCompute(int value) : value_(value) {}
  double forward_backward(const SplitTokens&, const dscore_model_hooks&, double) override {
    return value_;
  }
  void forward(const SplitTokens&, const dscore_model_hooks&, double*, float*) override {
    throw sdk::Error(DSCORE_DATA_LOSS, "thrown in the module");
  }

 private:
  int value_;
};

}  // namespace
}  // namespace dscore::transformer::testing

extern "C" __attribute__((visibility("default"))) dscore_status dscore_fake_cuda_make_compute(
    const dscore::transformer::CudaModuleRequest* request, dscore::transformer::Compute** out,
    char* error, size_t capacity) {
  using namespace dscore::transformer::testing;
  return dscore::transformer::serve_cuda_module_request<FakeConfig, FakeParams>(
      "fake", request, out, error, capacity, [](const FakeConfig& config, const FakeParams&) {
        if (config.value < 0) throw dscore::sdk::Error(DSCORE_UNAVAILABLE, "no device here");
        return std::unique_ptr<dscore::transformer::Compute>(new ThrowingCompute(config.value));
      });
}
