// A dscore checkpoint written as DeepSpeed's engine saves one at ZeRO stage 1
// or 2, for `engine.load_checkpoint` to resume (the reverse of
// deepspeed_import.h):
//
//   <out>/latest, <out>/<tag>/mp_rank_00_model_states.pt
//   <out>/<tag>/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt   R < world_size
//   or, universal: <out>/latest_universal, <out>/<tag>/zero/<param>/<state>.pt
//
// The parameters are laid back to back in the checkpoint's order, padded to a
// multiple of 2 x world_size, and each rank gets its equal slice of the fp32
// masters (without the padding) and of the Adam moments (with it), the
// torch optimizer state DeepSpeed's Adam keeps (step, param group), the
// counters, the LR scheduler's position and the config. Any world size and
// stage that saved the dscore checkpoint can be exported at any other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

struct DeepSpeedExportOptions {
  std::string tag;     // "" = the checkpoint's `latest`
  int world_size = 1;  // DeepSpeed's data-parallel ranks that will load it
  int zero_stage = 2;  // 1 or 2
  // The lr of the next update (the param group's "lr" DeepSpeed resumes
  // with): the caller computes it from the config's schedule.
  double next_lr = 0;
  // ds_to_universal.py's layout instead (`latest_universal`, zero/<param>/),
  // which DeepSpeed loads at any world size with "load_universal": true.
  bool universal = false;
};

struct DeepSpeedExportResult {
  std::string tag;
  std::vector<std::string> files;  // written into out_dir/<tag>
  int64_t global_steps = 0;
};

// Adam-family state only (exp_avg, exp_avg_sq); fp32 or bf16 models.
// Other optimizers, fp16 and stages 0 and 3 are refused by name.
Result<DeepSpeedExportResult> export_deepspeed_checkpoint(const std::string& dir,
                                                          const std::string& out_dir,
                                                          const DeepSpeedExportOptions& options);

}  // namespace dscore::checkpoint
