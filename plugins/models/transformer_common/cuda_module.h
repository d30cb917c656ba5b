// A decoder model's CUDA compute, built as a module of its own that the
// plugin loads only when a model is created with "device": "cuda". The
// plugin (libdscore_gpt.so, libdscore_llama.so) links no CUDA library, so a
// CPU run loads neither cudart nor cuBLAS, and a machine without them runs
// the plugin on the CPU; the module links cuBLAS and needs it only then.
//
// The module sits in the subfolder cuda/ beside its plugin, not in the
// plugin folder itself: the host dlopen()s every .so in that folder.
//
// The module is built from the same sources, by the same compiler and
// standard library, as the plugin that loads it (one CMake build): C++
// types (the model's config and params, transformer::Compute) cross between
// them as they are, and exceptions thrown by the module's Compute are caught
// by the plugin's guard (GCC matches typeinfo by name across shared
// objects). Only the factory's symbol is extern "C", so that dlsym finds it
// by a plain name, and the factory hands back failure as a status and text.
#pragma once

#include <dscore/plugin.h>
#include <dscore/cpp/plugin.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "compute.h"

namespace dscore::transformer {

// Raised whenever CudaModuleRequest or Compute changes.
inline constexpr uint32_t kCudaModuleAbi = 1;

// What the plugin hands its module's factory. The sizes are a cheap check
// that plugin and module come from the same build.
struct CudaModuleRequest {
  uint32_t abi = kCudaModuleAbi;
  uint32_t config_size = 0;  // sizeof the model's config type
  uint32_t params_size = 0;  // sizeof the model's params type
  const void* config = nullptr;
  const void* params = nullptr;
};

// The factory a module exports (extern "C"): on success *out is a new
// Compute the caller owns (delete it before the process exits; the module
// is never unloaded); on failure a status and a NUL-terminated message in
// error (capacity bytes).
using CudaComputeFactory = dscore_status (*)(const CudaModuleRequest* request, Compute** out,
                                             char* error, size_t capacity);

// `file_name` in the cuda/ folder beside the shared object that holds this
// code (dladdr), e.g. /opt/dscore/lib/dscore/plugins/cuda/libdscore_gpt_cuda.so.
std::string cuda_module_path(const char* file_name);

// The factory `symbol` of the module at `path`, loading the module with
// RTLD_NOW | RTLD_LOCAL on first use; a loaded module stays loaded (it may
// have started threads, and the Computes it made point into it). Thread-safe.
// Throws sdk::Error(DSCORE_UNAVAILABLE) naming `model`, the path, dlerror()'s
// text and the fix: cuBLAS missing from the library path, the module missing
// from the install, or the symbol missing from the file.
CudaComputeFactory load_cuda_module(const char* model, const std::string& path, const char* symbol);

// Calls `factory` with `request`; throws its failure as sdk::Error.
std::unique_ptr<Compute> call_cuda_module(CudaComputeFactory factory,
                                          const CudaModuleRequest& request);

// The plugin's side in one call: `model`'s module `file_name` beside the
// plugin, its factory `symbol` called with the model's config and params.
template <class Config, class Params>
std::unique_ptr<Compute> load_model_cuda_compute(const char* model, const char* file_name,
                                                 const char* symbol, const Config& config,
                                                 const Params& params) {
  CudaModuleRequest request;
  request.config_size = sizeof config;
  request.params_size = sizeof params;
  request.config = &config;
  request.params = &params;
  return call_cuda_module(load_cuda_module(model, cuda_module_path(file_name), symbol), request);
}

// The plugin's way to its CUDA compute (what a model created with "device":
// "cuda" computes with): load_model_cuda_compute in a plugin built with its
// CUDA module (DSCORE_MODEL_WITH_CUDA on the plugin's target); in a build
// without CUDA, UNIMPLEMENTED naming the fix.
template <class Config, class Params>
std::unique_ptr<Compute> plugin_cuda_compute(const char* model, const char* file_name,
                                             const char* symbol, const Config& config,
                                             const Params& params) {
#ifdef DSCORE_MODEL_WITH_CUDA
  return load_model_cuda_compute(model, file_name, symbol, config, params);
#else
  (void)file_name, (void)symbol, (void)config, (void)params;
  throw sdk::Error(DSCORE_UNIMPLEMENTED,
                   std::string(model) +
                       ": \"device\": \"cuda\" needs a dscore built with CUDA (DSCORE_WITH_CUDA); "
                       "this build computes on the CPU only: set \"device\": \"cpu\"");
#endif
}

// The module's side of the factory: checks the request against the types
// this module was built with, runs make() (returning unique_ptr<Compute>)
// and turns every exception into a status and message.
template <class Config, class Params, class Make>
dscore_status serve_cuda_module_request(const char* model, const CudaModuleRequest* request,
                                        Compute** out, char* error, size_t capacity,
                                        Make&& make) noexcept {
  auto fail = [&](dscore_status code, const char* text) {
    if (error != nullptr && capacity > 0) {
      std::strncpy(error, text, capacity - 1);
      error[capacity - 1] = '\0';
    }
    return code;
  };
  if (request == nullptr || out == nullptr) return fail(DSCORE_INVALID_ARGUMENT, "NULL argument");
  if (request->abi != kCudaModuleAbi || request->config_size != sizeof(Config) ||
      request->params_size != sizeof(Params))
    return fail(DSCORE_FAILED_PRECONDITION,
                (std::string(model) +
                 ": the CUDA module was built from other sources than the plugin that loads "
                 "it; install the plugin and its cuda/ folder from one build")
                    .c_str());
  try {
    *out = make(*static_cast<const Config*>(request->config),
                *static_cast<const Params*>(request->params))
               .release();
    return DSCORE_OK;
  } catch (const sdk::Error& e) {
    return fail(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(DSCORE_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return fail(DSCORE_INTERNAL, e.what());
  } catch (...) {
    return fail(DSCORE_INTERNAL, "unknown C++ exception");
  }
}

}  // namespace dscore::transformer
