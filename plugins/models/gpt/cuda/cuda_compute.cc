// make_cuda_compute (compute.h), in the CUDA module: the runner over the CUDA
// backend, in bf16 or fp32 per the "cuda_dtype" param, on the current
// device, once a device is known to be there.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <dscore/cpp/plugin.hpp>

#include <memory>
#include <string>

#include "../../transformer_common/cuda/cuda_backend.h"
#include "../compute.h"

namespace dscore::gpt {

std::unique_ptr<GptCompute> make_cuda_compute(const GptConfig& config, const GptParams& params) {
  gpu::require_cuda_device("gpt");
  if (config.cuda_dtype == "fp32")
    return std::make_unique<RunnerCompute<gpu::CudaBackend<float>>>(config, params);
  if (config.cuda_dtype == "bf16")
    return std::make_unique<RunnerCompute<gpu::CudaBackend<__nv_bfloat16>>>(config, params);
  throw sdk::Error(DSCORE_INVALID_ARGUMENT, "gpt: \"cuda_dtype\": \"" + config.cuda_dtype +
                                                "\" is not one of \"bf16\", \"fp32\"");
}

}  // namespace dscore::gpt
