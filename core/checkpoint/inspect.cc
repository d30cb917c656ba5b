#include "core/checkpoint/inspect.h"

#include <dscore/cpp/dtype.hpp>

#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/checksum.h"
#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {
namespace {

std::string state_summary(const CheckpointInfo& info) {
  const json::Value& s = info.state();
  const json::Value& c = member(s, "counters");
  const json::Value& ls = member(s, "loss_scaler");
  std::string text =
      "  saved by " + std::to_string(info.header0.world_size) + " rank(s), ZeRO stage " +
      std::to_string(info.header0.zero_stage) + ", model dtype " +
      (member(s, "model_dtype").is_string() ? member(s, "model_dtype").as_string() : "?") +
      ", dscore " +
      (member(s, "dscore_version").is_string() ? member(s, "dscore_version").as_string() : "?") +
      "\n";
  text += "  global_steps " + std::to_string(int_member(c, "global_steps", -1)) +
          ", global_samples " + std::to_string(int_member(c, "global_samples", -1)) +
          ", skipped_steps " + std::to_string(int_member(c, "skipped_steps", -1)) +
          ", loss scale " + json::serialize(member(ls, "scale")) + ", lr schedule t=" +
          std::to_string(int_member(member(s, "lr_scheduler"), "last_batch_iteration", 0)) + "\n";
  const json::Value& opt = member(s, "optimizer");
  text += "  optimizer " +
          (member(opt, "type").is_string() ? member(opt, "type").as_string() : "?") +
          ", state slots:";
  for (const json::Value& slot : member(opt, "slots").items())
    text += " " + (member(slot, "name").is_string() ? member(slot, "name").as_string() : "?");
  int64_t elements = 0;
  for (const SavedParam& p : info.params) elements += p.numel;
  text += "\n  " + std::to_string(info.params.size()) + " parameters, " + std::to_string(elements) +
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
  std::vector<std::string> all = info.model_files;
  all.insert(all.end(), info.optim_files.begin(), info.optim_files.end());
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
  for (const auto* names : {&info.model_files, &info.optim_files}) {
    DSCORE_ASSIGN_OR_RETURN(FragmentSet set, FragmentSet::open(info.path, *names));
    std::vector<std::string> slots = {names == &info.model_files ? kParamSlot : kMasterSlot};
    if (names == &info.optim_files)
      for (const json::Value& slot : member(member(info.state(), "optimizer"), "slots").items())
        if (member(slot, "name").is_string()) slots.push_back(member(slot, "name").as_string());
    for (const std::string& slot : slots)
      DSCORE_RETURN_IF_ERROR(set.check_complete(slot, info.params));
  }
  *report += "verified " + std::to_string(all.size()) + " files, " + std::to_string(tensors) +
             " tensors, " + std::to_string(bytes) +
             " bytes: every checksum matches and every parameter is complete\n";
  return Status::Ok();
}

}  // namespace dscore::checkpoint
