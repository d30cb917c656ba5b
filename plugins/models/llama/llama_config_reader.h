// The llama model's "model" section, read and checked: each unsupported or
// inconsistent setting is an error that names it.
#pragma once

#include <dscore/cpp/plugin.hpp>

#include "llama_config.h"

namespace dscore::llama {

LlamaConfig read_config(const sdk::Params& params);

}  // namespace dscore::llama
