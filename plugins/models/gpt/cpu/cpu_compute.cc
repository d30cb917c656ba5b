// The CPU compute of the GPT model (float).
#include "../../transformer_common/cpu/gemm.h"
#include "../compute.h"
#include "cpu_backend.h"

namespace dscore::gpt {

std::unique_ptr<GptCompute> make_cpu_compute(const GptConfig& config, const GptParams& params,
                                             sdk::HostRef host) {
  transformer::cpu::load_gemm_library();
  return std::make_unique<RunnerCompute<cpu::CpuBackend<float>>>(config, params, host);
}

}  // namespace dscore::gpt
