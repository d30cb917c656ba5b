// The schema of ds_config.json: every key DeepSpeed documents
// (docs/deepspeed-reference.md: configuration, ZeRO, monitors, comms logger) with its type,
// default, aliases, deprecations, "auto" rule and the TrainingConfig member it fills (the one place
// a key and its default are written), plus dscore's own sections (model, data, plugins, comm,
// train_steps, checkpoint_dir, seed). Unknown keys are errors at every level, top level included
// (DeepSpeed ignores top-level typos; see docs/deepspeed-differences.md).
#pragma once

#include "core/config/schema.h"

namespace dscore::config {

// Built once; immutable and safe to share between threads.
const ObjectSpec& deepspeed_schema();

}  // namespace dscore::config
