// Where the GPT model computes: a runner (runner.h) over the CPU backend or,
// in CUDA builds, the CUDA backend, behind one interface
// (plugins/models/transformer_common/compute.h) so gpt.cc picks by the "device" param.
// The CUDA backend lives in its own module, libdscore_gpt_cuda.so
// (plugins/models/transformer_common/cuda_module.h), loaded on first use.
#pragma once

#include <dscore/model.h>

#include <memory>

#include "../transformer_common/compute.h"
#include "gpt_config.h"
#include "gpt_params.h"
#include "runner.h"
#include "tokens.h"

namespace dscore::gpt {

using GptCompute = transformer::Compute;
template <class Backend>
using RunnerCompute = transformer::RunnerCompute<GptRunner, GptConfig, GptParams, Backend>;

// Activations are counted in `host`'s ledger.
std::unique_ptr<GptCompute> make_cpu_compute(const GptConfig& config, const GptParams& params,
                                             sdk::HostRef host);
// The CUDA compute, made in the CUDA module (cuda/cuda_compute.cc; the gpu
// tests link it directly). Throws when no CUDA device is visible.
std::unique_ptr<GptCompute> make_cuda_compute(const GptConfig& config, const GptParams& params);

// The CUDA module (in the cuda/ folder beside the plugin) and the symbol
// of its make_cuda_compute (transformer::plugin_cuda_compute loads it).
inline constexpr char kCudaModuleFile[] = "libdscore_gpt_cuda.so";
inline constexpr char kCudaFactorySymbol[] = "dscore_gpt_cuda_make_compute";

}  // namespace dscore::gpt
