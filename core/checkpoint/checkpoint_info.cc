#include "core/checkpoint/checkpoint_info.h"

#include <cctype>

#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {

Result<CheckpointInfo> open_checkpoint(const std::string& dir, const std::string& tag) {
  CheckpointInfo info;
  info.dir = dir;
  info.tag = tag;
  if (info.tag.empty()) {
    auto latest = read_text_file(dir + "/" + kLatestName, 4096);
    if (!latest.ok() && latest.status().code() == DSCORE_NOT_FOUND)
      return not_found("no checkpoint in " + dir + ": " + dir + "/" + kLatestName +
                       " does not exist (name a tag, or check the folder)");
    if (!latest.ok()) return latest.status();
    info.tag = *latest;
    while (!info.tag.empty() && std::isspace(static_cast<unsigned char>(info.tag.back())))
      info.tag.pop_back();
  }
  DSCORE_RETURN_IF_ERROR(check_tag(info.tag));
  info.path = dir + "/" + info.tag;
  if (!is_folder(info.path))
    return not_found(
        (tag.empty() ? dir + "/latest names tag " + info.tag : "checkpoint tag " + info.tag) +
        " but " + info.path +
        " does not exist: the save did not complete or the folder was moved; name "
        "another tag");
  info.model0_name = model_states_name(0, 0);
  if (!path_exists(info.path + "/" + info.model0_name)) info.model0_name = model_states_name(3, 0);
  if (!path_exists(info.path + "/" + info.model0_name)) {
    if (path_exists(info.path + "/mp_rank_00_model_states.pt") ||
        path_exists(info.path + "/zero_pp_rank_0_mp_rank_00_model_states.pt"))
      return failed_precondition(info.path +
                                 " is a DeepSpeed checkpoint (.pt files): convert it with `dscore "
                                 "checkpoint import " +
                                 dir + " OUT`, then resume from OUT (`dscore run --resume " + dir +
                                 "` does both)");
    return data_loss(info.path + " has no " + model_states_name(0, 0) + " or " + info.model0_name +
                     ": not a dscore checkpoint, or an incomplete copy of one");
  }
  DSCORE_ASSIGN_OR_RETURN(info.model0, SafetensorsReader::open(info.path + "/" + info.model0_name));
  DSCORE_ASSIGN_OR_RETURN(info.header0, parse_header(info.model0));
  const SafetensorsReader& model0 = info.model0;
  DSCORE_ASSIGN_OR_RETURN(info.state, training_state_from_json(info.header0.state, model0.path()));
  for (const auto* names : {&info.state.model_files, &info.state.optim_files})
    for (const std::string& n : *names)
      if (!path_exists(info.path + "/" + n))
        return data_loss("checkpoint " + info.path + " is missing " + n + " (it was saved by " +
                         std::to_string(info.header0.world_size) +
                         " rank(s) and every rank's file is needed)");
  return info;
}

}  // namespace dscore::checkpoint
