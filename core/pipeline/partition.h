// Which layers each pipeline stage runs: DeepSpeed's PipelineModule
// partition methods (deepspeed/runtime/pipe/module.py _partition_layers)
// over the model's layer list, so a config cuts a model where DeepSpeed
// cuts the same layers.
//   "uniform"     the same number of layers per stage (partition_uniform)
//   "parameters"  balanced parameter counts (partition_balanced over each
//                 layer's parameters; a tied copy counts on both stages as
//                 DeepSpeed counts a TiedLayerSpec's module on each)
//   "type:REGEX"  balanced counts of the layers whose name REGEX matches
//                 (case-insensitive search, as DeepSpeed matches class names)
// "best", the "pipeline" section's default in DeepSpeed's config, is
// "parameters" (PipelineModule's default).
#pragma once

#include <dscore/model.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::pipeline {

// parts[s] .. parts[s + 1] are stage s's items; parts has num_parts + 1
// entries from 0 to num_items. With fewer items than parts, the last parts
// are empty (as DeepSpeed's).
std::vector<size_t> partition_uniform(size_t num_items, int num_parts);
// The linear partition minimising (largest - smallest) part weight,
// DeepSpeed's dynamic programme (ties resolved as it resolves them).
std::vector<size_t> partition_balanced(const std::vector<double>& weights, int num_parts);

// The layer bounds of `stages` stages by `method`; INVALID_ARGUMENT naming
// the method or a stage left without layers.
Result<std::vector<size_t>> partition_layers(const dscore_model_description& model, int stages,
                                             const std::string& method);

}  // namespace dscore::pipeline
