// The training state a checkpoint carries besides its tensors: counters,
// loss scaler, schedule position, optimizer slot list, the saved layout and
// file list, the resolved config and the caller's client state. It travels
// as JSON in rank 0's model-states file (format.h FileHeader::state); the
// optimizer's and scheduler's own extra state travel as tensors instead
// (kOptimizerExtraTensor, kSchedulerExtraTensor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/format.h"
#include "core/config/json.h"

namespace dscore::checkpoint {

// An optimizer state slot as saved (zero::StateSlot, with the dtype by name).
struct SavedSlot {
  std::string name;
  std::string dtype;  // "fp32", "bf16", ... (sdk dtype_name)
  int64_t elements_per_param = 1;
};

struct TrainingState {
  std::string dscore_version;
  std::string model_dtype;         // sdk dtype_name of what the model computes on
  std::vector<SavedParam> params;  // the layout, in order (numel derived from shape)
  std::vector<std::string> model_files, optim_files;  // names inside the tag folder
  // A node-local save (checkpoint.use_node_local_storage): the host whose
  // disk holds each file above; empty for a save every rank sees.
  std::vector<std::string> model_file_hosts, optim_file_hosts;
  bool node_local() const { return !optim_file_hosts.empty(); }

  struct Counters {
    int64_t global_steps = 0;
    int64_t global_samples = 0;
    int64_t skipped_steps = 0;
    int64_t micro_steps = 0;
  } counters;

  struct LossScaler {  // zero::LossScaler::State, and whether it was dynamic
    bool dynamic = false;
    double scale = 1;
    int64_t iteration = 0;
    int64_t last_overflow_iteration = -1;
    int64_t hysteresis_left = 1;
  } loss_scaler;

  int64_t lr_last_batch_iteration = 0;  // the schedule's position

  std::string optimizer_type;
  std::vector<SavedSlot> optimizer_slots;

  // Batches are a function of the step (core/data/sampler.h) and every
  // random draw of the seed and the step, so these few numbers are the
  // sampler's and the RNG's whole state.
  int64_t sampler_next_global_step = 0;
  int64_t train_batch_size = 0;
  int64_t seed = 0;

  json::Value ds_config;     // the resolved config of the run that saved
  json::Value client_state;  // the caller's own JSON, returned by load

  std::vector<std::string> optimizer_slot_names() const;
};

// The JSON written into the checkpoint. Member order and value types are the
// on-disk format: checkpoints written by earlier builds read back unchanged.
json::Value to_json(const TrainingState& state);

// Every field is required: a missing or mistyped one is DATA_LOSS
// "<where>: the training state's <path> is missing" (or "... is not a
// <type>"), with <path> such as "counters.global_steps".
Result<TrainingState> training_state_from_json(const json::Value& value, const std::string& where);

}  // namespace dscore::checkpoint
