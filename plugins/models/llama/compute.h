// Where the llama model computes: its runner (runner.h) over the CPU
// backend or, in CUDA builds, the CUDA backend, behind one interface
// (plugins/models/transformer_common/compute.h) so llama.cc picks by "device".
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
// Defined by cuda/ in CUDA builds; elsewhere it throws, saying so.
std::unique_ptr<transformer::Compute> make_cuda_compute(const LlamaConfig& config,
                                                        const LlamaParams& params);

}  // namespace dscore::llama
