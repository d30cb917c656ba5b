// Where the GPT model computes: a runner (runner.h) over the CPU backend or,
// in CUDA builds, the CUDA backend, behind one interface
// (plugins/models/transformer_common/compute.h) so gpt.cc picks by the "device" param.
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
// Defined by cuda/ in CUDA builds; elsewhere it throws, saying so.
std::unique_ptr<GptCompute> make_cuda_compute(const GptConfig& config, const GptParams& params);

}  // namespace dscore::gpt
