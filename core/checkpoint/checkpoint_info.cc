#include "core/checkpoint/checkpoint_info.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {
namespace {

// The lowest rank's stage-3 model-states file in `folder`, or "".
std::string first_stage3_model_states(const std::string& folder) {
  std::string best;
  long best_rank = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    long rank = -1;
    char tail[64] = {};
    if (std::sscanf(name.c_str(), "zero_pp_rank_%ld_%63s", &rank, tail) != 2 || rank < 0 ||
        name != model_states_name(3, static_cast<int>(rank)))
      continue;
    if (best_rank < 0 || rank < best_rank) best_rank = rank, best = name;
  }
  return best;
}

}  // namespace

std::string CheckpointInfo::absent_text() const {
  std::string out;
  for (size_t i = 0; i < absent.size(); ++i) {
    std::string host;
    for (const auto& [names, owners] : {std::pair{&state.model_files, &state.model_file_hosts},
                                        std::pair{&state.optim_files, &state.optim_file_hosts}})
      for (size_t k = 0; k < names->size() && k < owners->size(); ++k)
        if ((*names)[k] == absent[i]) host = (*owners)[k];
    out += (i == 0 ? "" : ", ") + absent[i] + " (on " + host + ")";
  }
  return out;
}

std::string CheckpointInfo::absent_remedy() const {
  std::vector<std::string> hosts;
  for (const std::string& h : state.optim_file_hosts)
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  std::string list;
  for (size_t i = 0; i < hosts.size(); ++i)
    list += (i == 0 ? "" : (i + 1 == hosts.size() ? " and " : ", ")) + hosts[i];
  return "copy " + path + "/ from every node that saved it (" + list + ") into this node's " +
         path + "/, then load again";
}

Result<CheckpointInfo> open_checkpoint(const std::string& dir, const std::string& tag,
                                       bool node_part) {
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
    // A node-local save at stage 3 on a node without rank 0: any rank's
    // model states carry the training state.
    std::string other = first_stage3_model_states(info.path);
    if (other.empty())
      return data_loss(info.path + " has no " + model_states_name(0, 0) + " or " +
                       info.model0_name +
                       ": not a dscore checkpoint, or an incomplete copy of one");
    info.model0_name = std::move(other);
  }
  DSCORE_ASSIGN_OR_RETURN(info.model0, SafetensorsReader::open(info.path + "/" + info.model0_name));
  DSCORE_ASSIGN_OR_RETURN(info.header0, parse_header(info.model0));
  const SafetensorsReader& model0 = info.model0;
  DSCORE_ASSIGN_OR_RETURN(info.state, training_state_from_json(info.header0.state, model0.path()));
  const TrainingState& state = info.state;
  if (info.model0_name != model_states_name(0, 0) && info.model0_name != model_states_name(3, 0) &&
      !state.node_local())
    return data_loss(info.path + " has no " + model_states_name(3, 0) +
                     ": not a dscore checkpoint, or an incomplete copy of one");
  for (const auto* names : {&state.model_files, &state.optim_files})
    for (const std::string& n : *names) {
      if (path_exists(info.path + "/" + n)) continue;
      if (!state.node_local())
        return data_loss("checkpoint " + info.path + " is missing " + n + " (it was saved by " +
                         std::to_string(info.header0.world_size) +
                         " rank(s) and every rank's file is needed)");
      info.absent.push_back(n);
    }
  if (!info.absent.empty() && !node_part)
    return failed_precondition("checkpoint " + info.path +
                               " was saved with checkpoint.use_node_local_storage and this folder "
                               "holds only its node's shards: it lacks " +
                               info.absent_text() + "; " + info.absent_remedy());
  return info;
}

}  // namespace dscore::checkpoint
