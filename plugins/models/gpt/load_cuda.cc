// load_cuda_compute (compute.h): the gpt plugin's way to its CUDA module,
// libdscore_gpt_cuda.so in the cuda/ folder beside the plugin, loaded only
// when a model is created with "device": "cuda". Builds without CUDA have
// no module and say so.
#include <memory>
#include <string>

#include "../transformer_common/cuda_module.h"
#include "compute.h"

namespace dscore::gpt {

std::unique_ptr<GptCompute> load_cuda_compute(const GptConfig& config, const GptParams& params) {
#ifdef DSCORE_GPT_WITH_CUDA
  return transformer::load_model_cuda_compute("gpt", kCudaModuleFile, kCudaFactorySymbol, config,
                                              params);
#else
  (void)config;
  (void)params;
  throw sdk::Error(DSCORE_UNIMPLEMENTED,
                   "gpt: \"device\": \"cuda\" needs a dscore built with CUDA (DSCORE_WITH_CUDA); "
                   "this build computes on the CPU only: set \"device\": \"cpu\"");
#endif
}

}  // namespace dscore::gpt
