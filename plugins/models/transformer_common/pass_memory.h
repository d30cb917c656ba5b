// What the gpt and llama models share about their passes' memory: the
// memory one micro-batch's pass declares (model.h activation_bytes), on the
// CPU (host memory) and on a GPU (device memory),
// and the check that keeps a pass's operand buffers in the form they were
// sized for (the runners' fused blocks: bf16 operands in bf16 layers).
#pragma once

#include <dscore/cpp/model_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "counting_backend.h"
#include "cpu/gemm_bf16.h"
#include "cpu/linear.h"
#include "cpu/view_scratch.h"
#include "cuda_pass_memory.h"
#include "stage_blocks.h"

namespace dscore::transformer {

// `config` with the blocks checkpointing keeps only the inputs of: the
// configured ones, else all `layers`; none without checkpointing.
template <class Config>
Config checkpointed_config(const Config& config, int64_t layers, bool checkpointing) {
  Config c = config;
  c.checkpoint_blocks = !checkpointing                 ? 0
                        : config.checkpoint_blocks > 0 ? config.checkpoint_blocks
                                                       : layers;
  return c;
}

inline void check_micro_batch(int64_t micro_batch) {
  if (micro_batch < 1) throw sdk::Error(DSCORE_INVALID_ARGUMENT, "micro_batch must be >= 1");
}

// The pass on the CPU of `micro_batch` samples: `runner_bytes(config)` (the
// runner's allocations, counted by its own allocation code) for the
// checkpointed config, plus the LM head's working block.
template <class Config>
int64_t local_tokens(const Config& c) {
  if constexpr (requires { c.local_tokens(); })
    return c.local_tokens();  // this rank's slice of the sequence
  else
    return c.block_size;
}
template <class Config, class RunnerBytes>
uint64_t declared_pass_bytes(const Config& config, int64_t layers, int64_t micro_batch,
                             bool checkpointing, RunnerBytes&& runner_bytes) {
  check_micro_batch(micro_batch);
  const Config c = checkpointed_config(config, layers, checkpointing);
  return runner_bytes(c) + cpu::lm_head_working_bytes(micro_batch * local_tokens(c), c.vocab_size);
}

// The attention the CUDA backend runs on bf16 (cuda_pass_memory.h), from
// DSCORE_CUDA_ATTENTION; any value but "fused" and "unfused" throws
// INVALID_ARGUMENT naming both.
inline cuda_memory::AttentionKernels attention_kernels_from_env() {
  const char* value = std::getenv("DSCORE_CUDA_ATTENTION");
  if (auto kernels = cuda_memory::parse_attention_kernels(value)) return *kernels;
  throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                   std::string("DSCORE_CUDA_ATTENTION is \"") + value +
                       "\"; expected \"fused\" (the default: flash attention on bf16) or "
                       "\"unfused\" (cuBLAS products keeping the T x T probabilities)");
}

// Whether the CUDA backend runs the fused attention: on bf16 scalars, as
// DSCORE_CUDA_ATTENTION chooses (fp32 runs unfused always); and the
// attention state it then keeps per block. The backend and the declaration
// below decide with these.
inline bool runs_fused_attention(bool bf16) {
  return bf16 && attention_kernels_from_env() == cuda_memory::AttentionKernels::kFused;
}
inline StateElements attention_state_rule(bool fused) {
  return fused ? &cuda_memory::fused_state_elements : &cuda_memory::unfused_state_elements;
}

// The pass on a GPU of `micro_batch` samples (GPU memory): the runner's
// allocations over the CUDA backend, `runner_bytes(config, scalar, state)`
// counted by its own allocation code for the checkpointed config, with a
// scalar of the backend's size (float, or uint16_t standing for bf16: the
// config's cuda_dtype) and its attention state
// (cuda_memory::*_state_elements), plus the backend's
// scratch and workspace and one layer's copies for parameter views of
// `param_dtype` in device memory.
template <class Config, class RunnerBytes>
uint64_t declared_cuda_pass_bytes(const Config& config, int64_t layers, int64_t micro_batch,
                                  bool checkpointing, dscore_dtype param_dtype,
                                  const cuda_memory::PassShape& shape, RunnerBytes&& runner_bytes) {
  check_micro_batch(micro_batch);
  const bool bf16 = config.cuda_dtype == "bf16";
  const bool fused = runs_fused_attention(bf16);
  const uint64_t scalar_bytes = bf16 ? 2 : 4;
  const StateElements state = attention_state_rule(fused);
  const bool in_place = param_dtype == (bf16 ? DSCORE_DTYPE_BF16 : DSCORE_DTYPE_F32);
  const Config c = checkpointed_config(config, layers, checkpointing);
  return (bf16 ? runner_bytes(c, uint16_t{}, state) : runner_bytes(c, float{}, state)) +
         cuda_memory::scratch_bytes(shape, scalar_bytes, fused) +
         cuda_memory::layer_copies_bytes(shape.largest_layer, scalar_bytes, in_place);
}

// The memory one micro-batch's pass declares (model.h activation_bytes)
// where the model computes, for parameter and gradient views of these
// dtypes. On CUDA (GPU memory): declared_cuda_pass_bytes for `cuda_pass`
// (views of the compute's dtype are used in place). On the CPU (host
// memory): declared_pass_bytes, where bf16 views on the bf16 GEMM keep the
// runner's operand buffers in bf16 (half the size), plus the copies and
// bf16 working memory the host backend keeps for 16-bit views
// (cpu::view_scratch_bytes for `cpu_pass`). With checkpointing, the blocks
// the config checkpoints (all `layers` when it does not say) keep only
// their inputs. `runner_bytes(config, scalar, bf16_operands, state)` counts
// the runner's allocations (runner_allocation_bytes).
template <class Config, class RunnerBytes>
uint64_t declared_activation_bytes(const Config& config, int64_t layers, int64_t micro_batch,
                                   bool checkpointing, dscore_dtype param_dtype,
                                   dscore_dtype grad_dtype, const cpu::PassShape& cpu_pass,
                                   const cuda_memory::PassShape& cuda_pass,
                                   RunnerBytes&& runner_bytes) {
  if (config.device == "cuda")
    return declared_cuda_pass_bytes(config, layers, micro_batch, checkpointing, param_dtype,
                                    cuda_pass,
                                    [&](const Config& c, auto scalar, StateElements state) {
                                      return runner_bytes(c, scalar, false, state);
                                    });
  const bool bf16_operands = cpu::bf16_operands_for(param_dtype);
  return declared_pass_bytes(config, layers, micro_batch, checkpointing,
                             [&](const Config& c) {
                               return runner_bytes(c, float{}, bf16_operands,
                                                   &cpu::attention_state_elements);
                             }) +
         cpu::view_scratch_bytes(cpu_pass, param_dtype, grad_dtype);
}

// A pipeline stage's activation memory (model.h stage_activation_bytes),
// on the CPU (the pipeline runs there): each slot holds the Runner made for
// the stage's blocks (stage_blocks.h), its allocations counted by its own
// allocation code (runner_allocation_bytes) for the checkpointed config;
// the slots share what declared_activation_bytes adds beside the runner,
// the LM head's working block (on the stage with the final layer) and the
// view scratch of `cpu_pass`.
template <template <class> class Runner, class Config, class Params>
sdk::StageMemory declared_stage_bytes(const Config& config, const Params& params, int64_t layers,
                                      const dscore_pipeline_stage& stage, int64_t micro_batch,
                                      bool checkpointing, dscore_dtype param_dtype,
                                      dscore_dtype grad_dtype, const cpu::PassShape& cpu_pass) {
  check_micro_batch(micro_batch);
  if (config.device == "cuda")
    throw sdk::Error(DSCORE_UNIMPLEMENTED, "pipeline stages run on the CPU only");
  const Config c = checkpointed_config(config, layers, checkpointing);
  const StageBlocks blocks = stage_blocks(stage, layers);
  const bool last = static_cast<int64_t>(stage.end_layer) == layers + 2;
  sdk::StageMemory memory;
  memory.slot_bytes = runner_allocation_bytes<Runner, float, float>(
      c, params, micro_batch, cpu::bf16_operands_for(param_dtype), &cpu::attention_state_elements,
      blocks.lo, blocks.hi);
  memory.shared_bytes =
      (last ? cpu::lm_head_working_bytes(micro_batch * c.block_size, c.vocab_size) : 0) +
      cpu::view_scratch_bytes(cpu_pass, param_dtype, grad_dtype);
  return memory;
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
