// The blocks a pipeline stage of the gpt or llama runs: layer 0 is the
// embeddings, layer l + 1 block l, the last layer the final norm and head
// (model.h dscore_pipeline_stage). A stage's runner keeps activations for
// its blocks only (compute.h), and its declared memory counts the same.
#pragma once

#include <dscore/model.h>

#include <algorithm>
#include <cstdint>

namespace dscore::transformer {

struct StageBlocks {
  int64_t lo = 0, hi = 0;  // blocks [lo, hi)
};

// The blocks of `stage` in a model of `blocks` blocks.
inline StageBlocks stage_blocks(const dscore_pipeline_stage& stage, int64_t blocks) {
  const auto block = [](size_t layer) {
    return layer == 0 ? int64_t{0} : static_cast<int64_t>(layer) - 1;
  };
  return {block(stage.first_layer), std::min<int64_t>(block(stage.end_layer), blocks)};
}

}  // namespace dscore::transformer
