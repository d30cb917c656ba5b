// make_cuda_compute (compute.h), in the CUDA module: the llama runner over the
// CUDA backend, in bf16 or fp32 per "cuda_dtype", once a device is known
// to be there.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <dscore/cpp/plugin.hpp>

#include <memory>
#include <string>

#include "../compute.h"
#include "cuda_backend.h"

namespace dscore::llama {

std::unique_ptr<transformer::Compute> make_cuda_compute(const LlamaConfig& config,
                                                        const LlamaParams& params) {
  gpt::gpu::require_cuda_device("llama");
  if (config.cuda_dtype == "fp32")
    return std::make_unique<RunnerCompute<gpu::CudaBackend<float>>>(config, params);
  return std::make_unique<RunnerCompute<gpu::CudaBackend<__nv_bfloat16>>>(config, params);
}

}  // namespace dscore::llama
