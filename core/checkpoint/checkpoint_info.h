// Opening a saved checkpoint: which tag (`latest` or the one named), rank
// 0's model-states file with the training state, the saved parameter list
// and the files every rank wrote. Used by the engine's load, `dscore
// checkpoint inspect` and `dscore zero-to-fp32`.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/format.h"

namespace dscore::checkpoint {

struct CheckpointInfo {
  std::string dir, tag;
  std::string path;          // dir/tag
  std::string model0_name;   // rank 0's model-states file
  SafetensorsReader model0;  // open
  FileHeader header0;        // its header; .state is the training state
  std::vector<SavedParam> params;
  std::vector<std::string> model_files, optim_files;  // names inside `path`
  const json::Value& state() const { return header0.state; }
};

// tag "" means the one <dir>/latest names. Errors name what is missing and
// what to do; every listed file must exist.
Result<CheckpointInfo> open_checkpoint(const std::string& dir, const std::string& tag);

// Helpers for reading the training state.
const json::Value& member(const json::Value& object, const char* key);
int64_t int_member(const json::Value& object, const char* key, int64_t fallback);
double number_member(const json::Value& object, const char* key, double fallback);

}  // namespace dscore::checkpoint
