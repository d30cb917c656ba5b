#include "core/pipeline/pipe_spec.h"

namespace dscore::pipeline {

std::vector<Step> PipeSpec::schedule(int stage) const {
  return interleaved ? interleaved_schedule(shape, stage) : train_schedule(shape, stage);
}

Result<PipeSpec> pipe_spec_of(const config::TrainingConfig& config) {
  PipeSpec spec;
  spec.interleaved = config.pipeline.schedule == "interleaved";
  spec.shape = {static_cast<int>(config::pipeline_stages_of(config)),
                static_cast<int>(config.batch.gradient_accumulation_steps),
                spec.interleaved ? static_cast<int>(config.pipeline.virtual_stages) : 1};
  spec.partition = config.pipeline.partition.empty() ? "parameters" : config.pipeline.partition;
  if (spec.interleaved) {
    if (const std::string error = interleaved_schedule_error(spec.shape); !error.empty())
      return invalid_argument("pipeline.schedule \"interleaved\": " + error);
  }
  return spec;
}

}  // namespace dscore::pipeline
