// Checks, through the C ABI, that a decoder model plugin of a CUDA build
// keeps CUDA out of CPU runs and fails clearly without its CUDA module
// (plugins/models/transformer_common/cuda_module.h): a CPU model loads no
// cuBLAS; a copy of the plugin without its cuda/ folder answers
// "device": "cuda" with an error naming the module's path; with the module
// but no GPU, the module's own "no CUDA device" error; made only to describe
// itself (DSCORE_CREATE_DESCRIBE_ONLY), it needs neither. Used by the gpt
// and llama load tests, which run everywhere (no gpu label).
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <dscore/model.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "tests/fakes/fake_host.h"

namespace dscore::transformer::testing {

namespace fakes = dscore::testing;

inline bool have_gpu() {
  int count = 0;
  const bool yes = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return yes;
}

inline bool cublas_is_loaded() {
  void* handle = dlopen("libcublas.so.13", RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

// Creates model `name` from the plugin at `plugin` with `tiny` applied to
// the defaults and "device" set; returns the status and leaves the error in
// FakeHost::instance().last_error(). The model, if made, is destroyed.
inline dscore_status create_model(const std::string& plugin, const char* name,
                                  const std::function<void(fakes::CreateArgs&)>& tiny,
                                  const char* device) {
  fakes::TestPluginLibrary lib(plugin);
  const auto* vt = lib.vtable<dscore_model_vtable>(DSCORE_KIND_MODEL, name);
  fakes::CreateArgs args = fakes::CreateArgs::with_defaults(lib.find(DSCORE_KIND_MODEL, name));
  tiny(args);
  args.string("device", device);
  fakes::FakeHost::instance().clear_error();
  dscore_model* model = nullptr;
  const dscore_status status = vt->create(args.get(), &model);
  if (model != nullptr) vt->destroy(model);
  return status;
}

// A CPU model loads no cuBLAS: the plugin links none.
inline void expect_cpu_model_loads_no_cublas(const std::string& plugin, const char* name,
                                             const std::function<void(fakes::CreateArgs&)>& tiny) {
  ASSERT_FALSE(cublas_is_loaded()) << "cuBLAS was loaded before the plugin";
  EXPECT_EQ(create_model(plugin, name, tiny, "cpu"), DSCORE_OK)
      << fakes::FakeHost::instance().last_error();
  EXPECT_FALSE(cublas_is_loaded()) << plugin << " loaded cuBLAS for a CPU model";
}

// The plugin copied alone into a scratch folder (no cuda/ beside it):
// "device": "cuda" fails, naming the module it looked for.
inline void expect_missing_module_error(const std::string& plugin, const char* name,
                                        const char* module_file,
                                        const std::function<void(fakes::CreateArgs&)>& tiny) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dscore-cuda-module-test-" + std::string(name) +
                                                    "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path copy = dir / fs::path(plugin).filename();
  fs::copy_file(plugin, copy, fs::copy_options::overwrite_existing);
  const dscore_status status = create_model(copy.string(), name, tiny, "cuda");
  const std::string error = fakes::FakeHost::instance().last_error();
  fs::remove_all(dir);
  EXPECT_EQ(status, DSCORE_UNAVAILABLE) << error;
  const std::string module = (dir / "cuda" / module_file).string();
  EXPECT_NE(
      error.find(std::string(name) + ": \"device\": \"cuda\" needs the CUDA module " + module +
                 ", which did not load: " + module + ": cannot open shared object file"),
      std::string::npos)
      << error;
  EXPECT_NE(error.find("missing from this install"), std::string::npos) << error;
  EXPECT_NE(error.find("\"device\": \"cpu\""), std::string::npos) << error;
}

// With the module (built beside the plugin) and no GPU: the module loads,
// bringing cuBLAS (which also shows that cublas_is_loaded() can see it),
// and says that no device is visible.
inline void expect_no_device_error(const std::string& plugin, const char* name,
                                   const std::function<void(fakes::CreateArgs&)>& tiny) {
  EXPECT_EQ(create_model(plugin, name, tiny, "cuda"), DSCORE_UNAVAILABLE);
  const std::string error = fakes::FakeHost::instance().last_error();
  EXPECT_TRUE(cublas_is_loaded()) << "the CUDA module, which links cuBLAS, did not load";
  EXPECT_NE(error.find(std::string(name) + ": \"device\": \"cuda\" but no CUDA device is visible"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("\"device\": \"cpu\""), std::string::npos) << error;
}

// Made only to describe itself (`dscore plan`), a "device": "cuda" model
// needs neither its module nor a GPU (the plugin is copied alone, without
// its cuda/ folder): it declares its GPU memory, the cuBLAS workspace
// (32 MiB) included and so more than the CPU compute's, and refuses to
// compute, saying why. `block`: the block_size `tiny` sets.
inline void expect_describe_only_model_needs_no_gpu(
    const std::string& plugin, const char* name,
    const std::function<void(fakes::CreateArgs&)>& tiny, int64_t block) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() /
      ("dscore-describe-only-test-" + std::string(name) + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path copy = dir / fs::path(plugin).filename();
  fs::copy_file(plugin, copy, fs::copy_options::overwrite_existing);
  {
    fakes::TestPluginLibrary lib(copy.string());
    const auto* vt = lib.vtable<dscore_model_vtable>(DSCORE_KIND_MODEL, name);
    uint64_t bytes[2] = {0, 0};  // cuda, cpu
    for (int i = 0; i < 2; ++i) {
      fakes::CreateArgs args = fakes::CreateArgs::with_defaults(lib.find(DSCORE_KIND_MODEL, name));
      tiny(args);
      args.string("device", i == 0 ? "cuda" : "cpu").flags(DSCORE_CREATE_DESCRIBE_ONLY);
      dscore_model* model = nullptr;
      ASSERT_EQ(vt->create(args.get(), &model), DSCORE_OK)
          << fakes::FakeHost::instance().last_error();
      EXPECT_EQ(
          vt->activation_bytes_for(model, 2, 0, DSCORE_DTYPE_BF16, DSCORE_DTYPE_BF16, &bytes[i]),
          DSCORE_OK)
          << fakes::FakeHost::instance().last_error();
      if (i == 0) {
        const fakes::TestTensor tokens(DSCORE_DTYPE_I32, {2, block + 1}, "tokens");  // token 0
        const dscore_tensor* pointer = tokens.view();
        dscore_batch batch{};
        batch.struct_size = sizeof batch;
        batch.batch_size = 2;
        batch.count = 1;
        batch.tensors = &pointer;
        // Hooks that fail the test if called: the model must refuse first.
        dscore_model_hooks hooks{};
        hooks.struct_size = sizeof hooks;
        hooks.acquire = [](void*, size_t, dscore_acquire_mode,
                           dscore_layer_views*) -> dscore_status {
          ADD_FAILURE() << "a describe-only model acquired a layer";
          return DSCORE_INTERNAL;
        };
        hooks.release = [](void*, size_t) -> dscore_status { return DSCORE_INTERNAL; };
        hooks.grads_ready = [](void*, size_t) -> dscore_status { return DSCORE_INTERNAL; };
        double loss = 0;
        EXPECT_EQ(vt->forward_backward(model, &batch, &hooks, 1.0, &loss),
                  DSCORE_FAILED_PRECONDITION);
        EXPECT_NE(fakes::FakeHost::instance().last_error().find(
                      std::string(name) + ": this instance was created only to describe the model"),
                  std::string::npos)
            << fakes::FakeHost::instance().last_error();
      }
      vt->destroy(model);
    }
    EXPECT_GT(bytes[0], uint64_t{32} << 20);
    EXPECT_NE(bytes[0], bytes[1] + (uint64_t{32} << 20));
  }
  fs::remove_all(dir);
}

}  // namespace dscore::transformer::testing
