// The CPU compute of the GPT model (float), and the stand-in for
// make_cuda_compute in builds without CUDA.
#include "../../transformer_common/cpu/gemm.h"
#include "../compute.h"
#include "cpu_backend.h"

namespace dscore::gpt {

std::unique_ptr<GptCompute> make_cpu_compute(const GptConfig& config, const GptParams& params,
                                             sdk::HostRef host) {
  transformer::cpu::use_single_threaded_blas();
  return std::make_unique<RunnerCompute<cpu::CpuBackend<float>>>(config, params, host);
}

#ifndef DSCORE_GPT_WITH_CUDA
std::unique_ptr<GptCompute> make_cuda_compute(const GptConfig&, const GptParams&) {
  throw sdk::Error(DSCORE_UNIMPLEMENTED,
                   "gpt: \"device\": \"cuda\" needs a dscore built with CUDA (DSCORE_WITH_CUDA); "
                   "this build computes on the CPU only: set \"device\": \"cpu\"");
}
#endif

}  // namespace dscore::gpt
