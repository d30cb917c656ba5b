#include "core/checkpoint/checkpoint_info.h"

#include <cctype>

#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {
namespace {

std::vector<std::string> strings_of(const json::Value& v) {
  std::vector<std::string> out;
  if (v.is_array())
    for (const json::Value& s : v.items())
      if (s.is_string()) out.push_back(s.as_string());
  return out;
}

}  // namespace

const json::Value& member(const json::Value& object, const char* key) {
  static const json::Value kNull;
  const json::Value* f = object.is_object() ? object.find(key) : nullptr;
  return f != nullptr ? *f : kNull;
}

int64_t int_member(const json::Value& object, const char* key, int64_t fallback) {
  const json::Value& v = member(object, key);
  return v.is_integral() ? v.as_int() : fallback;
}

double number_member(const json::Value& object, const char* key, double fallback) {
  const json::Value& v = member(object, key);
  return v.is_number() ? v.as_number() : fallback;
}

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
  if (!path_exists(info.path + "/" + info.model0_name))
    return data_loss(info.path + " has no " + model_states_name(0, 0) + " or " + info.model0_name +
                     ": not a dscore checkpoint, or an incomplete copy of one");
  DSCORE_ASSIGN_OR_RETURN(info.model0, SafetensorsReader::open(info.path + "/" + info.model0_name));
  DSCORE_ASSIGN_OR_RETURN(info.header0, parse_header(info.model0));
  const SafetensorsReader& model0 = info.model0;
  const json::Value& state = info.header0.state;
  if (!state.is_object()) return data_loss(model0.path() + " carries no training state");
  for (const json::Value& p : member(state, "params").items()) {
    SavedParam sp;
    const json::Value& name = member(p, "name");
    if (!name.is_string()) return data_loss(model0.path() + ": a saved parameter has no name");
    sp.name = name.as_string();
    sp.numel = 1;
    for (const json::Value& d : member(p, "shape").items()) {
      if (!d.is_integral() || d.as_int() < 0)
        return data_loss(model0.path() + ": parameter " + sp.name + " has a bad shape");
      sp.shape.push_back(d.as_int());
      sp.numel *= d.as_int();
    }
    info.params.push_back(std::move(sp));
  }
  const json::Value& files = member(state, "files");
  info.model_files = strings_of(member(files, "model_states"));
  info.optim_files = strings_of(member(files, "optim_states"));
  if (info.model_files.empty() || info.optim_files.empty())
    return data_loss(model0.path() + ": the training state lists no files");
  for (const auto* names : {&info.model_files, &info.optim_files})
    for (const std::string& n : *names)
      if (!path_exists(info.path + "/" + n))
        return data_loss("checkpoint " + info.path + " is missing " + n + " (it was saved by " +
                         std::to_string(info.header0.world_size) +
                         " rank(s) and every rank's file is needed)");
  return info;
}

}  // namespace dscore::checkpoint
