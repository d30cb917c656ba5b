// Where the llama model computes: its runner (runner.h) over the CPU
// backend or, in CUDA builds, the CUDA backend, behind one interface
// (plugins/models/transformer_common/compute.h) so llama.cc picks by "device".
// The CUDA backend lives in its own module, libdscore_llama_cuda.so
// (plugins/models/transformer_common/cuda_module.h), loaded on first use.
#pragma once

#include <dscore/cpp/plugin.hpp>

#include <memory>

#include "../transformer_common/compute.h"
#include "llama_config.h"
#include "llama_params.h"
#include "runner.h"

namespace dscore::llama {

template <class Backend>
using RunnerCompute = transformer::RunnerCompute<LlamaRunner, LlamaConfig, LlamaParams, Backend>;

// Activations are counted in `host`'s ledger.
std::unique_ptr<transformer::Compute> make_cpu_compute(const LlamaConfig& config,
                                                       const LlamaParams& params,
                                                       sdk::HostRef host);
// The CUDA compute, made in the CUDA module (cuda/cuda_compute.cc; the gpu
// tests link it directly). Throws when no CUDA device is visible.
std::unique_ptr<transformer::Compute> make_cuda_compute(const LlamaConfig& config,
                                                        const LlamaParams& params);

// The CUDA module (in the cuda/ folder beside the plugin) and the symbol
// of its make_cuda_compute (transformer::plugin_cuda_compute loads it).
inline constexpr char kCudaModuleFile[] = "libdscore_llama_cuda.so";
inline constexpr char kCudaFactorySymbol[] = "dscore_llama_cuda_make_compute";

}  // namespace dscore::llama
