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
  // A node-local save read where only this node's part is: the files of
  // other nodes this folder lacks (empty otherwise).
  std::vector<std::string> absent;

  // "zero_pp_rank_2_... and zero_pp_rank_3_... (on hostB)": what `absent`
  // holds and whose disks have it.
  std::string absent_text() const;
  // What to do about `absent`: copy the named hosts' files in.
  std::string absent_remedy() const;
};

// tag "" means the one <dir>/latest names. Errors name what is missing and
// what to do; the training state must be complete (DATA_LOSS naming the
// field) and every file it lists must exist — except, with `node_part`, the
// other nodes' files of a node-local save (listed in `absent`; without
// `node_part` they are an error naming their hosts). On a node without rank
// 0, a node-local save's training state is read from the node's own copy.
Result<CheckpointInfo> open_checkpoint(const std::string& dir, const std::string& tag,
                                       bool node_part = false);

}  // namespace dscore::checkpoint
