// What a loaded config must also satisfy for this build to train it
// (`dscore run`, Engine::create): the placement's rules (placement.h) and
// the features the engine does not run yet, each with its key and the fix.
// `dscore config check` does not apply them: a config DeepSpeed accepts
// loads, and these say what this build cannot do with it.
#pragma once

#include <vector>

#include "core/config/config.h"
#include "core/config/placement.h"
#include "core/config/training_config.h"

namespace dscore::config {

// What the run has that the config does not say.
struct RunOptions {
  // "device": "cuda" is opt-in until the CUDA path has run on a GPU
  // (DSCORE_EXPERIMENTAL_CUDA_ENGINE=1, read by the program: docs/gpu.md).
  bool experimental_cuda_engine = false;
};

// What this build does not run (the engine refuses it as UNIMPLEMENTED):
// placement_unsupported(placement), "device": "cuda" without the opt-in or
// without the nccl backend, DeepSpeed's universal and node-local
// checkpoints, a communication_data_type other than the gradients'.
std::vector<ConfigError> unsupported_features(const TrainingConfig& config,
                                              const Placement& placement,
                                              const RunOptions& options);

// placement_errors(placement), then unsupported_features: what `dscore run`
// reports as config errors before it creates anything.
std::vector<ConfigError> run_errors(const TrainingConfig& config, const Placement& placement,
                                    const RunOptions& options);
// With the config's own placement.
std::vector<ConfigError> run_errors(const TrainingConfig& config, const RunOptions& options = {});

}  // namespace dscore::config
