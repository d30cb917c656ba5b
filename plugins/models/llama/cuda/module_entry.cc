// The entry of libdscore_llama_cuda.so, the llama model's CUDA module: the
// factory the plugin finds with dlsym (transformer::plugin_cuda_compute). Same compiler and C++
// ABI as the plugin (one build): see transformer_common/cuda_module.h.
#include "../../transformer_common/cuda_module.h"
#include "../compute.h"

extern "C" __attribute__((visibility("default"))) dscore_status dscore_llama_cuda_make_compute(
    const dscore::transformer::CudaModuleRequest* request, dscore::transformer::Compute** out,
    char* error, size_t capacity) {
  return dscore::transformer::serve_cuda_module_request<dscore::llama::LlamaConfig,
                                                        dscore::llama::LlamaParams>(
      "llama", request, out, error, capacity, [](const auto& config, const auto& params) {
        return dscore::llama::make_cuda_compute(config, params);
      });
}
