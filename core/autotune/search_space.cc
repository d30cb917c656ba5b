#include "core/autotune/search_space.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

namespace dscore::autotune {
namespace {

json::Value& member(json::Value* object, const std::string& key) {
  json::Value* found = object->find(key);
  if (found != nullptr && found->is_object()) return *found;
  return object->set(key, json::Value::object());
}

// A knob's value for a folder name: "true", "200", "5e6".
std::string number_text(const json::Value& v) {
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  if (!v.is_number()) return json::serialize(v);
  const double x = v.as_number();
  if (x >= 1e4 && x == std::floor(x)) {
    int exponent = 0;
    double mantissa = x;
    while (mantissa >= 10 && std::fmod(mantissa, 10) == 0) {
      mantissa /= 10;
      ++exponent;
    }
    if (exponent >= 3)
      return std::to_string(static_cast<int64_t>(mantissa)) + "e" + std::to_string(exponent);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// An offload section for `device`: the user's own when it names that
// device, else one with the device (and the user's nvme_path for nvme).
void set_offload(json::Value* zero, const std::string& key, const std::string& device,
                 const std::string& nvme_path) {
  if (device == "none") {
    zero->erase(key);
    return;
  }
  const json::Value* user = zero->find(key);
  if (user != nullptr && user->is_object()) {
    const json::Value* d = user->find("device");
    if (d != nullptr && d->is_string() && d->as_string() == device) return;
  }
  json::Value section = json::Value::object();
  section.set("device", json::Value(device));
  if (device == "nvme") section.set("nvme_path", json::Value(nvme_path));
  zero->set(key, std::move(section));
}

std::string offload_of(const std::optional<config::OffloadConfig>& offload) {
  return offload ? config::offload_device_name(offload->device) : "none";
}

}  // namespace

std::string Candidate::name() const {
  std::string n = user_config ? "user_" : "";
  n += "z" + std::to_string(stage) + "_mb" + std::to_string(micro) + "_gas" + std::to_string(gas);
  if (checkpointing) n += "_ckpt";
  if (offload_optimizer != "none") n += "_opt" + offload_optimizer;
  if (offload_param != "none") n += "_param" + offload_param;
  if (threads > 0) n += "_t" + std::to_string(threads);
  if (zero_knob) n += "_" + zero_knob->first + "=" + number_text(zero_knob->second);
  return n;
}

Result<SearchBase> read_search_base(json::Value document, int world, int cpus) {
  if (!document.is_object()) return invalid_argument("the config is not a JSON object");
  SearchBase base;
  base.world = world;
  base.cpus = std::max(1, cpus);
  base.stages = {0};  // DeepSpeed's default stage
  if (json::Value* zero = document.find("zero_optimization");
      zero != nullptr && zero->is_object()) {
    if (json::Value* stage = zero->find("stage"); stage != nullptr) {
      const std::string kWhat =
          "zero_optimization.stage: give a stage 0-3, a list of them, or \"all\" to tune "
          "every stage";
      if (stage->is_string() && stage->as_string() == "all") {
        base.stages = {0, 1, 2, 3};
      } else if (stage->is_array()) {
        std::set<int> stages;
        for (const json::Value& s : stage->items()) {
          if (!s.is_int() || s.as_int() < 0 || s.as_int() > 3) return invalid_argument(kWhat);
          stages.insert(static_cast<int>(s.as_int()));
        }
        if (stages.empty()) return invalid_argument(kWhat);
        base.stages.assign(stages.begin(), stages.end());
      } else if (stage->is_int() && stage->as_int() >= 0 && stage->as_int() <= 3) {
        base.stages = {static_cast<int>(stage->as_int())};
      } else {
        return invalid_argument(kWhat);
      }
      *stage = json::Value(static_cast<int64_t>(base.stages.front()));
    }
    for (const char* key : {"offload_optimizer", "offload_param"}) {
      const json::Value* offload = zero->find(key);
      const json::Value* path =
          offload != nullptr && offload->is_object() ? offload->find("nvme_path") : nullptr;
      if (path != nullptr && path->is_string() && base.nvme_path.empty())
        base.nvme_path = path->as_string();
    }
  }
  if (const json::Value* tbs = document.find("train_batch_size"); tbs != nullptr && tbs->is_int())
    base.fixed_train_batch_size = tbs->as_int();
  if (const json::Value* gas = document.find("gradient_accumulation_steps");
      gas != nullptr && gas->is_int() && gas->as_int() > 0)
    base.gas = gas->as_int();
  base.document = std::move(document);
  return base;
}

Candidate user_candidate(const config::TrainingConfig& config, bool checkpointing, int threads) {
  Candidate c;
  c.user_config = true;
  c.stage = config.zero.stage;
  c.micro = config.batch.train_micro_batch_size_per_gpu;
  c.gas = config.batch.gradient_accumulation_steps;
  c.checkpointing = checkpointing;
  c.offload_optimizer = offload_of(config.zero.offload_optimizer);
  c.offload_param = offload_of(config.zero.offload_param);
  c.threads = threads;
  return c;
}

json::Value candidate_config(const SearchBase& base, const Candidate& c) {
  json::Value doc = base.document;
  doc.erase("autotuning");
  if (c.user_config) return doc;
  json::Value& zero = member(&doc, "zero_optimization");
  zero.set("stage", json::Value(static_cast<int64_t>(c.stage)));
  set_offload(&zero, "offload_optimizer", c.offload_optimizer, base.nvme_path);
  set_offload(&zero, "offload_param", c.stage == 3 ? c.offload_param : "none", base.nvme_path);
  if (c.zero_knob) zero.set(c.zero_knob->first, c.zero_knob->second);
  doc.set("train_micro_batch_size_per_gpu", json::Value(c.micro));
  doc.set("gradient_accumulation_steps", json::Value(c.gas));
  doc.set("train_batch_size", json::Value(c.micro * c.gas * base.world));
  if (c.checkpointing) {
    if (doc.find("activation_checkpointing") == nullptr ||
        !doc.find("activation_checkpointing")->is_object())
      doc.set("activation_checkpointing", json::Value::object());
  } else {
    doc.erase("activation_checkpointing");
    json::Value* model = doc.find("model");
    if (model != nullptr && model->is_object() && model->find("checkpoint_activations") != nullptr)
      model->set("checkpoint_activations", json::Value(false));
  }
  return doc;
}

json::Value trial_config(const json::Value& candidate, int64_t steps,
                         const std::string& config_dir) {
  json::Value doc = candidate;
  doc.set("train_steps", json::Value(steps));
  doc.erase("checkpoint_dir");
  doc.erase("save_interval");
  for (const char* monitor : {"tensorboard", "csv_monitor", "wandb", "comet"}) {
    json::Value* section = doc.find(monitor);
    if (section != nullptr && section->is_object()) section->set("enabled", json::Value(false));
  }
  if (json::Value* plugins = doc.find("plugins"); plugins != nullptr && plugins->is_object())
    plugins->erase("monitors");
  absolute_plugin_paths(&doc, config_dir);
  return doc;
}

void absolute_plugin_paths(json::Value* doc, const std::string& config_dir) {
  json::Value* plugins = doc->find("plugins");
  json::Value* paths =
      plugins != nullptr && plugins->is_object() ? plugins->find("paths") : nullptr;
  if (paths == nullptr || !paths->is_array()) return;
  for (json::Value& p : paths->items()) {
    if (!p.is_string() || std::filesystem::path(p.as_string()).is_absolute()) continue;
    p = json::Value(
        (std::filesystem::absolute(config_dir) / p.as_string()).lexically_normal().string());
  }
}

bool has_plugin_paths(const json::Value& doc) {
  const json::Value* plugins = doc.find("plugins");
  const json::Value* paths =
      plugins != nullptr && plugins->is_object() ? plugins->find("paths") : nullptr;
  return paths != nullptr && paths->is_array() && !paths->items().empty();
}

std::vector<int64_t> allowed_micro_batches(const SearchBase& base,
                                           const config::AutotuningConfig& settings) {
  std::vector<int64_t> sizes;
  const int64_t lo = settings.min_train_micro_batch_size_per_gpu;
  const int64_t hi = settings.max_train_micro_batch_size_per_gpu;
  if (base.fixed_train_batch_size) {
    const int64_t per_rank = *base.fixed_train_batch_size / base.world;
    if (per_rank * base.world != *base.fixed_train_batch_size) return sizes;
    for (int64_t m = lo; m <= std::min(hi, per_rank); ++m)
      if (per_rank % m == 0) sizes.push_back(m);
    return sizes;
  }
  for (int64_t m = lo; m <= hi; ++m) {
    const int64_t tbs = m * base.gas * base.world;
    if (tbs < settings.min_train_batch_size) continue;
    if (settings.max_train_batch_size && tbs > *settings.max_train_batch_size) break;
    sizes.push_back(m);
  }
  return sizes;
}

std::vector<int64_t> tuning_micro_batches(const std::vector<int64_t>& fitting, int64_t num_tuning) {
  if (fitting.empty() || num_tuning < 1) return {};
  const int64_t largest = fitting.back();
  std::vector<int64_t> upper;  // the fitting sizes in [largest / 2, largest]
  for (int64_t m : fitting)
    if (2 * m >= largest) upper.push_back(m);
  std::vector<int64_t> chosen;
  if (static_cast<int64_t>(upper.size()) >= num_tuning) {
    // Evenly spaced over the upper half, its ends included.
    for (int64_t i = 0; i < num_tuning; ++i) {
      const size_t at =
          num_tuning == 1
              ? upper.size() - 1
              : static_cast<size_t>(i * static_cast<int64_t>(upper.size() - 1) / (num_tuning - 1));
      chosen.push_back(upper[at]);
    }
  } else {
    const size_t from = fitting.size() > static_cast<size_t>(num_tuning)
                            ? fitting.size() - static_cast<size_t>(num_tuning)
                            : 0;
    chosen.assign(fitting.begin() + static_cast<std::ptrdiff_t>(from), fitting.end());
  }
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  std::reverse(chosen.begin(), chosen.end());  // largest first
  return chosen;
}

int64_t gas_for(const SearchBase& base, int64_t micro) {
  if (base.fixed_train_batch_size) return *base.fixed_train_batch_size / (base.world * micro);
  return base.gas;
}

std::vector<Candidate> phase_one_settings(const SearchBase& base, bool fast) {
  const Candidate like_user = base.user.value_or(Candidate{});
  std::vector<bool> checkpointing = {like_user.checkpointing};
  std::vector<int> threads = {0};
  if (!fast) {
    checkpointing = {false, true};
    const int per_rank = base.cpus / base.world;
    if (per_rank > 1) threads.push_back(per_rank - 1);
  }
  std::vector<std::string> devices = {"none", "cpu"};
  if (!base.nvme_path.empty()) devices.push_back("nvme");
  std::vector<Candidate> out;
  for (int stage : base.stages) {
    std::vector<std::string> optimizer = {stage == 0 ? "none" : like_user.offload_optimizer};
    std::vector<std::string> param = {stage == 3 ? like_user.offload_param : "none"};
    if (!fast) {
      optimizer = stage == 0 ? std::vector<std::string>{"none"} : devices;
      param = stage == 3 ? devices : std::vector<std::string>{"none"};
    }
    for (bool ckpt : checkpointing)
      for (const std::string& opt : optimizer)
        for (const std::string& par : param)
          for (int t : threads) {
            Candidate c;
            c.stage = stage;
            c.checkpointing = ckpt;
            c.offload_optimizer = opt;
            c.offload_param = par;
            c.threads = t;
            out.push_back(c);
          }
  }
  return out;
}

std::vector<Candidate> memory_savers(const Candidate& setting) {
  std::vector<Candidate> out;
  Candidate c = setting;
  if (!c.checkpointing) {
    c.checkpointing = true;
    out.push_back(c);
  }
  if (c.stage >= 1 && c.offload_optimizer == "none") {
    c.offload_optimizer = "cpu";
    out.push_back(c);
  }
  if (c.stage == 3 && c.offload_param == "none") {
    c.offload_param = "cpu";
    out.push_back(c);
  }
  return out;
}

std::vector<Candidate> knob_variants(const Candidate& best) {
  std::vector<std::pair<std::string, json::Value>> knobs;
  const std::vector<double> buckets = {5e6, 5e7, 5e8};
  // A reduction bucket is at most 2^24 elements (zero/plan.h
  // gradient_flush_elements): 5e8 would run as 5e7 does.
  if (best.stage >= 1)
    for (double b : {5e6, 5e7}) knobs.emplace_back("reduce_bucket_size", json::Value(b));
  if (best.stage == 1 || best.stage == 2)
    for (double b : buckets) knobs.emplace_back("allgather_bucket_size", json::Value(b));
  if (best.stage >= 2) {
    knobs.emplace_back("overlap_comm", json::Value(true));
    knobs.emplace_back("overlap_comm", json::Value(false));
    knobs.emplace_back("contiguous_gradients", json::Value(true));
    knobs.emplace_back("contiguous_gradients", json::Value(false));
  }
  if (best.stage == 3) {
    for (double b : {5e6, 5e7}) knobs.emplace_back("stage3_prefetch_bucket_size", json::Value(b));
    for (double t : {1e4, 1e5, 1e6})
      knobs.emplace_back("stage3_param_persistence_threshold", json::Value(t));
  }
  std::vector<Candidate> out;
  for (auto& knob : knobs) {
    Candidate c = best;
    c.user_config = false;
    c.zero_knob = std::move(knob);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace dscore::autotune
