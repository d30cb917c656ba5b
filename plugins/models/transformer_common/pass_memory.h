// What the gpt and llama models share about their passes' memory: the
// host memory one micro-batch's pass declares (model.h activation_bytes),
// and the check that keeps a pass's operand buffers in the form they were
// sized for (the runners' fused blocks: bf16 operands in bf16 layers).
#pragma once

#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <string>

#include "cpu/linear.h"

namespace dscore::transformer {

// The pass on the CPU of `micro_batch` samples: `runner_bytes(config)` (the
// runner's allocations, counted by its own allocation code) for the config
// with the blocks checkpointing keeps only the inputs of (the configured
// ones, else all `layers`), plus the LM head's working block.
template <class Config, class RunnerBytes>
uint64_t declared_pass_bytes(const char* model, const Config& config, int64_t layers,
                             int64_t micro_batch, bool checkpointing, RunnerBytes&& runner_bytes) {
  if (config.device != "cpu")
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     std::string(model) +
                         " on \"device\": \"cuda\" keeps its activations in GPU memory, which the "
                         "memory plan does not count");
  if (micro_batch < 1) throw sdk::Error(DSCORE_INVALID_ARGUMENT, "micro_batch must be >= 1");
  Config c = config;
  c.checkpoint_blocks = !checkpointing                 ? 0
                        : config.checkpoint_blocks > 0 ? config.checkpoint_blocks
                                                       : layers;
  return runner_bytes(c) + cpu::lm_head_working_bytes(micro_batch * c.block_size, c.vocab_size);
}

// A block whose linears read operands of the other form than the pass's
// buffers were sized for (its weights of another dtype than the
// embeddings') would overrun them: refused.
inline void check_operand_form(const char* model, int64_t block, bool block_bf16,
                               bool buffers_bf16) {
  if (block_bf16 == buffers_bf16) return;
  throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                   std::string(model) + ": block " + std::to_string(block) + "'s weights are " +
                       (block_bf16 ? "" : "not ") + "bf16 but the embeddings' are " +
                       (buffers_bf16 ? "" : "not ") +
                       "bf16: every layer's parameters must share one dtype");
}

}  // namespace dscore::transformer
