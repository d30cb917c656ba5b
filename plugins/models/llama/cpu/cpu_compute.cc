// The CPU compute of the llama model (float).
#include "../../transformer_common/cpu/gemm.h"
#include "../compute.h"
#include "cpu_backend.h"

namespace dscore::llama {

std::unique_ptr<transformer::Compute> make_cpu_compute(const LlamaConfig& config,
                                                       const LlamaParams& params,
                                                       sdk::HostRef host) {
  transformer::cpu::load_gemm_library();
  return std::make_unique<RunnerCompute<cpu::CpuBackend<float>>>(config, params, host);
}

}  // namespace dscore::llama
