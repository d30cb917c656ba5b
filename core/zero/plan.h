// The memory and communication plan of a run, per rank, computed from the
// config, the model's parameter layout and the optimizer's state slots
// before anything is allocated (`dscore plan`). The engine allocates exactly
// these buffers, so its counted allocations can be printed beside the plan.
// Memory follows the ZeRO paper's model states: with 16-bit parameters and
// Adam (K = 12: fp32 master + m + v), stage 0 holds (2+2+K)Psi, stage 1
// 2Psi + 2Psi + K Psi/N, stage 2 2Psi + (2+K)Psi/N, stage 3 (2+2+K)Psi/N,
// plus buffers; in fp32, 4-byte parameters and gradients and no master copy.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config/training_config.h"
#include "core/zero/param_layout.h"

namespace dscore::zero {

struct StateSlot {
  std::string name;
  dscore_dtype dtype = DSCORE_DTYPE_F32;
  uint32_t elements_per_param = 1;
};

struct MemoryPlan {
  int64_t parameters = 0;  // model-dtype parameters held (full, or shards in stage 3)
  int64_t gradients = 0;   // full gradients (stages 0/1) or the partition (2/3)
  int64_t master = 0;      // fp32 master weights of 16-bit models
  int64_t optimizer = 0;   // declared state slots
  int64_t buffers = 0;     // buckets, gathered layers, persistent parameters
  int64_t model_states() const { return parameters + gradients + master + optimizer; }
  int64_t total() const { return model_states() + buffers; }
};

struct ZeroPlan {
  int stage = 0;
  int world = 1;
  int rank = 0;
  int64_t numel = 0;  // Psi
  dscore_dtype model_dtype = DSCORE_DTYPE_F32;
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;
  MemoryPlan memory;
  // Elements moved per optimizer step, by collective (the communicator's
  // counting: the full buffer of each call).
  std::map<std::string, int64_t> comm_elements;
  int64_t comm_total() const;
};

// Dtypes a config trains with (docs/deepspeed-reference.md#derived-settings): the model's, and the
// gradient accumulation's (data_types.grad_accum_dtype, else fp32 for bf16
// at stage 0, else the model's).
dscore_dtype model_dtype_of(const config::TrainingConfig& config);
dscore_dtype grad_dtype_of(const config::TrainingConfig& config);

ZeroPlan make_plan(const config::TrainingConfig& config, const ParamLayout& layout,
                   const std::vector<StateSlot>& slots, int world, int rank);

// A table: one column per rank (or plan vs measured), bytes in KiB/MiB/GiB.
std::string format_plans(const std::vector<ZeroPlan>& plans);

}  // namespace dscore::zero
