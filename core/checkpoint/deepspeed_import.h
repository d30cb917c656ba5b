// A checkpoint written by DeepSpeed's engine.save_checkpoint (0.16-0.19) made
// into a dscore checkpoint, without torch and without running any of its
// code (torch_file.h reads the .pt files strictly):
//
//   <ds>/latest, <ds>/<tag>/mp_rank_00_model_states.pt            stages 0-2
//   <ds>/<tag>/zero_pp_rank_R_mp_rank_00_model_states.pt          stage 3
//   <ds>/<tag>/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt   stages 1-3
//   <ds>/latest_universal, <ds>/<tag>/zero/<param>/<state>.pt      ds_to_universal.py's
//
// DeepSpeed keeps each rank's fp32 master weights and optimizer state as
// flat partitions: stages 1-2 lay the parameters back to back (param_shapes
// order) and give each rank an equal slice; stage 3 gives every rank
// ceil(n / ranks) elements of each parameter. Each slice becomes fragments
// of dscore's format (format.h), so the result loads at any world size and
// stage. The counters, the LR schedule's position, the loss scale and the
// resolved config come along. Parameters keep their DeepSpeed names (the
// module's state_dict names, which are the model plugin's when it trained
// the same model, e.g. a Hugging Face one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

struct DeepSpeedImportOptions {
  std::string tag;  // "" = the folder's `latest`
};

struct DeepSpeedImportResult {
  std::string tag;
  int world_size = 0;  // DeepSpeed's data-parallel ranks
  int zero_stage = 0;
  std::string model_dtype;  // "fp32", "bf16", "fp16"
  std::string optimizer;    // the config's optimizer type, as written
  size_t params = 0;
  size_t groups = 0;  // DeepSpeed's parameter groups
  int64_t elements = 0;
  int64_t global_steps = 0;
  std::vector<std::string> files;  // written into out_dir/<tag>
};

// Reads DeepSpeed's checkpoint folder `ds_dir` and writes a dscore
// checkpoint into `out_dir` (<tag>/ and `latest`), which must not already
// hold that tag. Errors name the file and what is wrong or unsupported
// (model parallelism, several parameter groups, offloaded state, ...).
Result<DeepSpeedImportResult> import_deepspeed_checkpoint(const std::string& ds_dir,
                                                          const std::string& out_dir,
                                                          const DeepSpeedImportOptions& options);

// Whether `dir` is a folder DeepSpeed wrote (what import_deepspeed_checkpoint
// reads): its `latest` (or `latest_universal`) names a folder holding
// DeepSpeed's model states (.pt) or ds_to_universal.py's zero/.
bool is_deepspeed_checkpoint(const std::string& dir);

}  // namespace dscore::checkpoint
