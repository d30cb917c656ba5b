// The CPU compute of the llama model (float), and the stand-in for
// make_cuda_compute in builds without CUDA.
#include "../../transformer_common/cpu/gemm.h"
#include "../compute.h"
#include "cpu_backend.h"

namespace dscore::llama {

std::unique_ptr<transformer::Compute> make_cpu_compute(const LlamaConfig& config,
                                                       const LlamaParams& params,
                                                       sdk::HostRef host) {
  transformer::cpu::use_single_threaded_blas();
  return std::make_unique<RunnerCompute<cpu::CpuBackend<float>>>(config, params, host);
}

#ifndef DSCORE_LLAMA_WITH_CUDA
std::unique_ptr<transformer::Compute> make_cuda_compute(const LlamaConfig&, const LlamaParams&) {
  throw sdk::Error(DSCORE_UNIMPLEMENTED,
                   "llama: \"device\": \"cuda\" needs a dscore built with CUDA (DSCORE_WITH_CUDA); "
                   "this build computes on the CPU only: set \"device\": \"cpu\"");
}
#endif

}  // namespace dscore::llama
