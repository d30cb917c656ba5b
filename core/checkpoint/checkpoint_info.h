// Opening a saved checkpoint: which tag (`latest` or the one named), rank
// 0's model-states file with the training state, the saved parameter list
// and the files every rank wrote. Used by the engine's load, `dscore
// checkpoint inspect` and `dscore zero-to-fp32`.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/training_state.h"

namespace dscore::checkpoint {

struct CheckpointInfo {
  std::string dir, tag;
  std::string path;          // dir/tag
  std::string model0_name;   // rank 0's model-states file
  SafetensorsReader model0;  // open
  FileHeader header0;        // its header (.state: the training state as JSON)
  TrainingState state;       // header0.state, read
};

// tag "" means the one <dir>/latest names. Errors name what is missing and
// what to do; the training state must be complete (DATA_LOSS naming the
// field) and every file it lists must exist.
Result<CheckpointInfo> open_checkpoint(const std::string& dir, const std::string& tag);

}  // namespace dscore::checkpoint
