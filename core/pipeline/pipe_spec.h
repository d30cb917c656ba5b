// The pipeline a config asks for: its schedule's shape and kind and the
// partition method, read once from the "pipeline" section for the engine,
// `dscore plan` and the run's timing line (docs/pipeline.md).
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/config/training_config.h"
#include "core/pipeline/schedule.h"

namespace dscore::pipeline {

struct PipeSpec {
  PipeShape shape;
  bool interleaved = false;  // "schedule": "interleaved", else 1F1B
  std::string partition;     // "parameters" when the config does not say
  // The parts the partition cuts the layers into: stages x virtual_stages.
  int layer_parts() const { return shape.stages * shape.virtual_stages; }
  std::vector<Step> schedule(int stage) const;  // 1F1B or interleaved
};

// The config's pipeline (pipeline_stages_of() stages, the accumulation
// steps as micro-batches); INVALID_ARGUMENT naming "pipeline.schedule" for
// a shape the interleaved schedule refuses.
Result<PipeSpec> pipe_spec_of(const config::TrainingConfig& config);

}  // namespace dscore::pipeline
