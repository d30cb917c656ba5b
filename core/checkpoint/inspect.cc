#include "core/checkpoint/inspect.h"

#include <dscore/cpp/dtype.hpp>

#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/checksum.h"
#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {
namespace {

std::string state_summary(const CheckpointInfo& info) {
  const TrainingState& s = info.state;
  std::string text = "  saved by " + std::to_string(info.header0.world_size) +
                     " rank(s), ZeRO stage " + std::to_string(info.header0.zero_stage) +
                     ", model dtype " + s.model_dtype + ", dscore " + s.dscore_version + "\n";
  text += "  global_steps " + std::to_string(s.counters.global_steps) + ", global_samples " +
          std::to_string(s.counters.global_samples) + ", skipped_steps " +
          std::to_string(s.counters.skipped_steps) + ", loss scale " +
          json::serialize(json::Value(s.loss_scaler.scale)) +
          ", lr schedule t=" + std::to_string(s.lr_last_batch_iteration) + "\n";
  text += "  optimizer " + s.optimizer_type + ", state slots:";
  for (const SavedSlot& slot : s.optimizer_slots) text += " " + slot.name;
  int64_t elements = 0;
  for (const SavedParam& p : s.params) elements += p.numel;
  text += "\n  " + std::to_string(s.params.size()) + " parameters, " + std::to_string(elements) +
          " elements\n";
  return text;
}

}  // namespace

Status inspect_checkpoint(const std::string& dir, const std::string& tag, std::string* report) {
  DSCORE_ASSIGN_OR_RETURN(CheckpointInfo info, open_checkpoint(dir, tag));
  auto latest = read_text_file(dir + "/" + kLatestName, 4096);
  *report += "checkpoint " + info.path + " (tag " + info.tag +
             "; latest: " + (latest.ok() ? *latest : "none") + ")\n";
  *report += state_summary(info);
  size_t tensors = 0;
  uint64_t bytes = 0;
  const TrainingState& state = info.state;
  std::vector<std::string> all = state.model_files;
  all.insert(all.end(), state.optim_files.begin(), state.optim_files.end());
  for (const std::string& name : all) {
    DSCORE_ASSIGN_OR_RETURN(SafetensorsReader file,
                            SafetensorsReader::open(info.path + "/" + name));
    *report += name + ": " + std::to_string(file.file_size()) + " bytes, " +
               std::to_string(file.tensors().size()) + " tensors\n";
    for (const TensorInfo& t : file.tensors()) {
      *report += "  " + t.name + " " + safetensors_dtype_name(t.dtype) + " " + shape_text(t.shape) +
                 " " + std::to_string(t.bytes) + " B " +
                 (t.checksum ? format_checksum(*t.checksum) : "no checksum");
      const Status ok = file.verify(t);
      *report += ok.ok() ? " ok\n" : " CORRUPT\n";
      DSCORE_RETURN_IF_ERROR(ok);
      ++tensors;
      bytes += t.bytes;
    }
  }
  for (const auto* names : {&state.model_files, &state.optim_files}) {
    DSCORE_ASSIGN_OR_RETURN(FragmentSet set, FragmentSet::open(info.path, *names));
    std::vector<std::string> slots = {names == &state.model_files ? kParamSlot : kMasterSlot};
    if (names == &state.optim_files)
      for (const SavedSlot& slot : state.optimizer_slots) slots.push_back(slot.name);
    for (const std::string& slot : slots)
      DSCORE_RETURN_IF_ERROR(set.check_complete(slot, state.params));
  }
  *report += "verified " + std::to_string(all.size()) + " files, " + std::to_string(tensors) +
             " tensors, " + std::to_string(bytes) +
             " bytes: every checksum matches and every parameter is complete\n";
  return Status::Ok();
}

}  // namespace dscore::checkpoint
