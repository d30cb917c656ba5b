// TrainingState <-> JSON. to_json fixes the member order of the on-disk
// format; training_state_from_json reads it back strictly, naming the first
// missing or mistyped field by its dotted path.
#include "core/checkpoint/training_state.h"

#include <utility>

namespace dscore::checkpoint {
namespace {

json::Value string_array(const std::vector<std::string>& strings) {
  json::Value v = json::Value::array();
  for (const std::string& s : strings) v.push_back(json::Value(s));
  return v;
}

// Reads typed fields, keeping the first error. A failed read returns a
// harmless value so the caller can read on and check error() once.
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  const json::Value& field(const json::Value& object, const std::string& path, const char* key,
                           json::Type type) {
    const std::string name = path.empty() ? key : path + "." + key;
    const json::Value* v = object.is_object() ? object.find(key) : nullptr;
    if (v == nullptr) return fail(name + " is missing");
    const bool ok = type == json::Type::kInt      ? v->is_integral()
                    : type == json::Type::kDouble ? v->is_number()
                                                  : v->type() == type;
    if (!ok) return fail(name + " is not " + article(type) + json::type_name(type));
    return *v;
  }
  int64_t integer(const json::Value& o, const std::string& path, const char* key) {
    const json::Value& v = field(o, path, key, json::Type::kInt);
    return v.is_integral() ? v.as_int() : 0;
  }
  double number(const json::Value& o, const std::string& path, const char* key) {
    const json::Value& v = field(o, path, key, json::Type::kDouble);
    return v.is_number() ? v.as_number() : 0;
  }
  bool boolean(const json::Value& o, const std::string& path, const char* key) {
    const json::Value& v = field(o, path, key, json::Type::kBool);
    return v.is_bool() && v.as_bool();
  }
  std::string string(const json::Value& o, const std::string& path, const char* key) {
    const json::Value& v = field(o, path, key, json::Type::kString);
    return v.is_string() ? v.as_string() : std::string();
  }
  const json::Value& object(const json::Value& o, const std::string& path, const char* key) {
    return field(o, path, key, json::Type::kObject);
  }
  const std::vector<json::Value>& array(const json::Value& o, const std::string& path,
                                        const char* key) {
    static const std::vector<json::Value> kEmpty;
    const json::Value& v = field(o, path, key, json::Type::kArray);
    return v.is_array() ? v.items() : kEmpty;
  }
  std::vector<std::string> strings(const json::Value& o, const std::string& path, const char* key) {
    std::vector<std::string> out;
    const std::string name = path + "." + key;
    for (const json::Value& s : array(o, path, key)) {
      if (!s.is_string()) {
        fail(name + " holds a " + json::type_name(s.type()) + " where a file name belongs");
        break;
      }
      out.push_back(s.as_string());
    }
    return out;
  }
  const json::Value& fail(const std::string& what) {
    static const json::Value kNull;
    if (error_.ok()) error_ = data_loss(where_ + ": the training state's " + what);
    return kNull;
  }
  const Status& error() const { return error_; }

 private:
  static const char* article(json::Type type) {
    return type == json::Type::kInt || type == json::Type::kArray || type == json::Type::kObject
               ? "an "
               : "a ";
  }
  std::string where_;
  Status error_;
};

}  // namespace

std::vector<std::string> TrainingState::optimizer_slot_names() const {
  std::vector<std::string> names;
  for (const SavedSlot& s : optimizer_slots) names.push_back(s.name);
  return names;
}

json::Value to_json(const TrainingState& t) {
  json::Value s = json::Value::object();
  s.set("dscore_version", json::Value(t.dscore_version));
  s.set("model_dtype", json::Value(t.model_dtype));
  json::Value params = json::Value::array();
  for (const SavedParam& p : t.params) {
    json::Value e = json::Value::object();
    e.set("name", json::Value(p.name));
    json::Value shape = json::Value::array();
    for (int64_t d : p.shape) shape.push_back(json::Value(d));
    e.set("shape", std::move(shape));
    params.push_back(std::move(e));
  }
  s.set("params", std::move(params));
  json::Value files = json::Value::object();
  files.set("model_states", string_array(t.model_files));
  files.set("optim_states", string_array(t.optim_files));
  if (t.node_local()) {
    json::Value hosts = json::Value::object();
    hosts.set("model_states", string_array(t.model_file_hosts));
    hosts.set("optim_states", string_array(t.optim_file_hosts));
    files.set("hosts", std::move(hosts));
  }
  s.set("files", std::move(files));
  json::Value counters = json::Value::object();
  counters.set("global_steps", json::Value(t.counters.global_steps));
  counters.set("global_samples", json::Value(t.counters.global_samples));
  counters.set("skipped_steps", json::Value(t.counters.skipped_steps));
  counters.set("micro_steps", json::Value(t.counters.micro_steps));
  s.set("counters", std::move(counters));
  json::Value scaler = json::Value::object();
  scaler.set("dynamic", json::Value(t.loss_scaler.dynamic));
  scaler.set("scale", json::Value(t.loss_scaler.scale));
  scaler.set("iteration", json::Value(t.loss_scaler.iteration));
  scaler.set("last_overflow_iteration", json::Value(t.loss_scaler.last_overflow_iteration));
  scaler.set("hysteresis_left", json::Value(t.loss_scaler.hysteresis_left));
  s.set("loss_scaler", std::move(scaler));
  json::Value schedule = json::Value::object();
  schedule.set("last_batch_iteration", json::Value(t.lr_last_batch_iteration));
  s.set("lr_scheduler", std::move(schedule));
  json::Value optimizer = json::Value::object();
  optimizer.set("type", json::Value(t.optimizer_type));
  json::Value slots = json::Value::array();
  for (const SavedSlot& slot : t.optimizer_slots) {
    json::Value e = json::Value::object();
    e.set("name", json::Value(slot.name));
    e.set("dtype", json::Value(slot.dtype));
    e.set("elements_per_param", json::Value(slot.elements_per_param));
    slots.push_back(std::move(e));
  }
  optimizer.set("slots", std::move(slots));
  s.set("optimizer", std::move(optimizer));
  json::Value sampler = json::Value::object();
  sampler.set("next_global_step", json::Value(t.sampler_next_global_step));
  sampler.set("train_batch_size", json::Value(t.train_batch_size));
  s.set("data_sampler", std::move(sampler));
  json::Value rng = json::Value::object();
  rng.set("seed", json::Value(t.seed));
  s.set("rng", std::move(rng));
  s.set("ds_config", t.ds_config);
  s.set("client_state", t.client_state);
  return s;
}

Result<TrainingState> training_state_from_json(const json::Value& v, const std::string& where) {
  if (!v.is_object()) return data_loss(where + " carries no training state");
  Reader r(where);
  TrainingState t;
  t.dscore_version = r.string(v, "", "dscore_version");
  t.model_dtype = r.string(v, "", "model_dtype");
  const std::vector<json::Value>& params = r.array(v, "", "params");
  for (size_t i = 0; i < params.size() && r.error().ok(); ++i) {
    const std::string path = "params[" + std::to_string(i) + "]";
    SavedParam p;
    p.name = r.string(params[i], path, "name");
    p.numel = 1;
    for (const json::Value& d : r.array(params[i], path, "shape")) {
      if (!d.is_integral() || d.as_int() < 0) {
        r.fail(path + ".shape (parameter " + p.name + ") holds a bad dimension");
        break;
      }
      p.shape.push_back(d.as_int());
      p.numel *= d.as_int();
    }
    t.params.push_back(std::move(p));
  }
  const json::Value& files = r.object(v, "", "files");
  t.model_files = r.strings(files, "files", "model_states");
  t.optim_files = r.strings(files, "files", "optim_states");
  if (r.error().ok() && (t.model_files.empty() || t.optim_files.empty()))
    r.fail("files list no model_states or no optim_states");
  if (const json::Value* hosts = files.is_object() ? files.find("hosts") : nullptr) {
    t.model_file_hosts = r.strings(*hosts, "files.hosts", "model_states");
    t.optim_file_hosts = r.strings(*hosts, "files.hosts", "optim_states");
    if (r.error().ok() && (t.model_file_hosts.size() != t.model_files.size() ||
                           t.optim_file_hosts.size() != t.optim_files.size()))
      r.fail("files.hosts does not name a host for every file");
  }
  const json::Value& c = r.object(v, "", "counters");
  t.counters.global_steps = r.integer(c, "counters", "global_steps");
  t.counters.global_samples = r.integer(c, "counters", "global_samples");
  t.counters.skipped_steps = r.integer(c, "counters", "skipped_steps");
  t.counters.micro_steps = r.integer(c, "counters", "micro_steps");
  const json::Value& ls = r.object(v, "", "loss_scaler");
  t.loss_scaler.dynamic = r.boolean(ls, "loss_scaler", "dynamic");
  t.loss_scaler.scale = r.number(ls, "loss_scaler", "scale");
  t.loss_scaler.iteration = r.integer(ls, "loss_scaler", "iteration");
  t.loss_scaler.last_overflow_iteration = r.integer(ls, "loss_scaler", "last_overflow_iteration");
  t.loss_scaler.hysteresis_left = r.integer(ls, "loss_scaler", "hysteresis_left");
  t.lr_last_batch_iteration =
      r.integer(r.object(v, "", "lr_scheduler"), "lr_scheduler", "last_batch_iteration");
  const json::Value& opt = r.object(v, "", "optimizer");
  t.optimizer_type = r.string(opt, "optimizer", "type");
  const std::vector<json::Value>& slots = r.array(opt, "optimizer", "slots");
  for (size_t i = 0; i < slots.size() && r.error().ok(); ++i) {
    const std::string path = "optimizer.slots[" + std::to_string(i) + "]";
    t.optimizer_slots.push_back({r.string(slots[i], path, "name"),
                                 r.string(slots[i], path, "dtype"),
                                 r.integer(slots[i], path, "elements_per_param")});
  }
  const json::Value& sampler = r.object(v, "", "data_sampler");
  t.sampler_next_global_step = r.integer(sampler, "data_sampler", "next_global_step");
  t.train_batch_size = r.integer(sampler, "data_sampler", "train_batch_size");
  t.seed = r.integer(r.object(v, "", "rng"), "rng", "seed");
  t.ds_config = r.object(v, "", "ds_config");
  if (const json::Value* client = v.find("client_state"))
    t.client_state = *client;
  else
    r.fail("client_state is missing");
  DSCORE_RETURN_IF_ERROR(r.error());
  return t;
}

}  // namespace dscore::checkpoint
