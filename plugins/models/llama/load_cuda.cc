// load_cuda_compute (compute.h): the llama plugin's way to its CUDA module,
// libdscore_llama_cuda.so in the cuda/ folder beside the plugin, loaded only
// when a model is created with "device": "cuda". Builds without CUDA have
// no module and say so.
#include <memory>
#include <string>

#include "../transformer_common/cuda_module.h"
#include "compute.h"

namespace dscore::llama {

std::unique_ptr<transformer::Compute> load_cuda_compute(const LlamaConfig& config,
                                                        const LlamaParams& params) {
#ifdef DSCORE_LLAMA_WITH_CUDA
  return transformer::load_model_cuda_compute("llama", kCudaModuleFile, kCudaFactorySymbol, config,
                                              params);
#else
  (void)config;
  (void)params;
  throw sdk::Error(DSCORE_UNIMPLEMENTED,
                   "llama: \"device\": \"cuda\" needs a dscore built with CUDA (DSCORE_WITH_CUDA); "
                   "this build computes on the CPU only: set \"device\": \"cpu\"");
#endif
}

}  // namespace dscore::llama
