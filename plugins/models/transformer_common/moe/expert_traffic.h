// What expert parallelism's token exchanges (expert_exchange.h) move per
// micro-batch, for a model's collective_bytes (model.h): per MoE block,
// forward the experts' counts (E int64), the rows out and the outputs
// back, backward the output gradients out and the input gradients back,
// and a checkpointed block's recompute the forward's again. A rank sends
// its kept routes (`rows`) and, balanced, gets as many back, fp32.
#pragma once

#include <dscore/model.h>

#include <cstdint>

namespace dscore::transformer::moe {

// Blocks l (layer l + 1) in [0, blocks) with moe_block(l) inside `layers`;
// the first checkpoint_blocks are recomputed; rows x width values each way.
template <class IsMoeBlock>
void add_expert_traffic(int64_t blocks, IsMoeBlock&& moe_block, const dscore_pipeline_stage& layers,
                        int64_t checkpoint_blocks, int64_t experts, int64_t rows, int64_t width,
                        dscore_model_collectives* out) {
  const uint64_t counts = static_cast<uint64_t>(experts) * sizeof(int64_t);
  const uint64_t rows_bytes = static_cast<uint64_t>(rows * width) * sizeof(float);
  for (int64_t l = 0; l < blocks; ++l) {
    const auto layer = static_cast<size_t>(l + 1);
    if (!moe_block(l) || layer < layers.first_layer || layer >= layers.end_layer) continue;
    const uint64_t forwards = l < checkpoint_blocks ? 2 : 1;
    out->expert_parallel_calls += forwards * 3 + 2;
    out->expert_parallel_bytes += forwards * (counts + 2 * rows_bytes) + 2 * rows_bytes;
  }
}

}  // namespace dscore::transformer::moe
