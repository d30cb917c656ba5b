// The "auto" rules. Every key that accepts "auto" names one of these; the
// resolved value and the reason are printed at start-up (as notices).
//
//   rule                   value                                   convention from
//   ---------------------  --------------------------------------  -----------------------------
//   default                the field's default (unset if none)     dscore
//   batch                  unset here; batch.cc derives it from    HF Trainer ("auto" batch keys)
//                          the other batch keys
//   train_steps            --steps, else the file's train_steps;   HF Trainer (total_num_steps)
//                          an error when neither is set
//   optimizer_lr           optimizer.params.lr, else 1e-3          HF Trainer (warmup_max_lr)
//   hidden_squared         hidden_size^2                           HF reduce_bucket_size
//   hidden_squared_0_9     int(0.9 * hidden_size * hidden_size)    HF stage3_prefetch_bucket_size
//   hidden_x10             10 * hidden_size                        HF
//   stage3_param_persistence_threshold hf_max_grad_norm       1.0 HF Trainer's default
//   max_grad_norm reduced_precision_off  false                                   dscore: fp16/bf16
//   only when asked
//   aio_measured           the value `dscore io-bench` cached for      dscore (DeepSpeed:
//   ds_nvme_tune,
//                          the device of nvme_path, else the default   by hand)
//
// The hidden_* rules take hidden_size from the ResolveContext (the model
// plugin's answer) or else from "model.hidden_size" in the file; when neither
// is known they fall back to the field's default and say so.
#include "core/config/auto_rules.h"

#include <cstdio>
#include <memory>

#include "core/base/strings.h"
#include "core/config/aio_cache.h"
#include "core/config/schema_util.h"

namespace dscore::config {

const std::vector<AutoRuleInfo>& auto_rules() {
  static const std::vector<AutoRuleInfo> kRules = {
      {"default", "the key's default (left unset when it has none)"},
      {"batch",
       "derived from the other batch keys by the batch-size rule (train = micro * gas * world "
       "size)"},
      {"train_steps",
       "`dscore run --steps N`, else the file's \"train_steps\"; an error when neither is set"},
      {"optimizer_lr",
       "the optimizer's \"lr\" (optimizer.params.lr), else 1e-3, the optimizers' default"},
      {"hidden_squared",
       "hidden_size * hidden_size (the field's default when the hidden size is unknown)"},
      {"hidden_squared_0_9",
       "int(0.9 * hidden_size * hidden_size) (the field's default when the hidden size is "
       "unknown)"},
      {"hidden_x10", "10 * hidden_size (the field's default when the hidden size is unknown)"},
      {"hf_max_grad_norm", "1.0, the HuggingFace Trainer's default max_grad_norm"},
      {"reduced_precision_off", "false: dscore enables reduced precision only when asked"},
      {"aio_measured",
       "what `dscore io-bench` measured for the device of the run's nvme_path (cached per "
       "device), else the key's default"},
  };
  return kRules;
}

bool is_known_auto_rule(std::string_view name) {
  for (const AutoRuleInfo& r : auto_rules())
    if (name == r.name) return true;
  return false;
}

namespace {

const json::Value* lookup(const json::Value& doc, std::initializer_list<const char*> keys) {
  const json::Value* v = &doc;
  for (const char* k : keys) {
    v = v->find(k);
    if (!v) return nullptr;
  }
  return v;
}

AutoResolution field_default(const FieldSpec& field, std::string why) {
  AutoResolution r;
  r.value = field.default_value;
  r.explanation = field.default_value ? std::move(why) : "no default: left unset";
  return r;
}

// The run's nvme_path: the optimizer's, else the parameters' (the same
// device in every config seen so far; the optimizer moves more bytes).
std::optional<std::string> nvme_path_of(const json::Value& config) {
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    const json::Value* p = lookup(config, {"zero_optimization", section, "nvme_path"});
    if (p && p->is_string() && !p->as_string().empty()) return p->as_string();
  }
  return std::nullopt;
}

std::string gbps(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

// The aio cache entry for the config's nvme_path, looked up once per config
// (the five aio keys share it) and explained in full once.
struct AioMeasurement {
  std::optional<std::string> nvme_path;
  std::optional<DeviceId> device;
  AioCacheLookup lookup;
  std::string device_error;
  std::string explained_at;  // the first key whose notice says it all

  explicit AioMeasurement(const json::Value& config) : nvme_path(nvme_path_of(config)) {
    if (!nvme_path) return;
    Result<DeviceId> id = device_of(*nvme_path);
    if (!id.ok()) {
      device_error = id.status().message();
      return;
    }
    device = *id;
    lookup = read_aio_cache(*device);
  }

  std::optional<json::Value> value_of(const std::string& key) const {
    const json::Value measured = aio_json(*lookup.measured);
    const json::Value* value = measured.find(key);
    if (value == nullptr) return std::nullopt;
    return *value;
  }

  AutoResolution resolve(const FieldSpec& field, const std::string& path) {
    const bool first = explained_at.empty();
    if (first) explained_at = path;
    if (lookup.measured) {
      if (std::optional<json::Value> v = value_of(field.name)) {
        const MeasuredAio& m = *lookup.measured;
        if (!first) return {std::move(v), "measured with " + explained_at, ""};
        return {std::move(v),
                "measured by `dscore io-bench " + m.path + "` on " + m.measured_at +
                    " for the device of " + *nvme_path + " (" + device->text() + "): read " +
                    gbps(m.read_gbps) + " GB/s, write " + gbps(m.write_gbps) + " GB/s; from " +
                    lookup.file,
                ""};
      }
    }
    if (!first) return field_default(field, "the default, as " + explained_at);
    if (!nvme_path) return field_default(field, "no nvme_path to measure: the default");
    std::string why;
    if (!lookup.warning.empty())
      why = "warning: " + lookup.warning + "; ";
    else if (!device_error.empty())
      why = device_error + "; ";
    else
      why = "no measurement for the device of " + *nvme_path + " (" + device->text() + ")" +
            (lookup.file.empty() ? "" : " in " + lookup.file) + ": ";
    return field_default(field, why + "the default; run `dscore io-bench " + *nvme_path +
                                    "` to measure the disk and cache its best settings");
  }
};

class Resolver {
 public:
  Resolver(const ResolveContext& context, const json::Value& config)
      : context_(context), config_(config), aio_(std::make_shared<AioSlot>()) {}

  AutoResolution operator()(const std::string& rule, const FieldSpec& field,
                            const std::string& path) const {
    if (rule == "default") return field_default(field, "the default");
    if (rule == "batch") return {};  // batch.cc derives and reports it
    if (rule == "train_steps") return train_steps();
    if (rule == "optimizer_lr") return optimizer_lr();
    if (rule == "hidden_squared" || rule == "hidden_squared_0_9" || rule == "hidden_x10")
      return hidden(rule, field);
    if (rule == "hf_max_grad_norm")
      return {json::Value(1.0), "HuggingFace's default max_grad_norm", ""};
    if (rule == "reduced_precision_off")
      return {json::Value(false), "dscore enables reduced precision only when asked", ""};
    if (rule == "aio_measured") {
      if (!aio_->measurement) aio_->measurement = std::make_unique<AioMeasurement>(config_);
      return aio_->measurement->resolve(field, path);
    }
    return {std::nullopt, "", "unknown auto rule \"" + rule + "\" (a bug in the schema)"};
  }

 private:
  AutoResolution train_steps() const {
    if (context_.train_steps) return {json::Value(*context_.train_steps), "from --steps", ""};
    const json::Value* steps = config_.find("train_steps");
    if (steps && steps->is_integral())
      return {json::Value(steps->as_int()), "from \"train_steps\"", ""};
    return {std::nullopt, "", "set \"train_steps\" or pass --steps"};
  }

  AutoResolution optimizer_lr() const {
    const json::Value* lr = lookup(config_, {"optimizer", "params", "lr"});
    if (lr && lr->is_number()) return {json::Value(lr->as_number()), "optimizer.params.lr", ""};
    return {json::Value(1e-3), "optimizer.params.lr not given: the optimizers' default 1e-3", ""};
  }

  // hidden_size and where it came from, if known.
  std::optional<std::pair<int64_t, std::string>> hidden_size() const {
    if (context_.hidden_size && *context_.hidden_size > 0)
      return std::make_pair(*context_.hidden_size, std::string("the model's hidden_size"));
    const json::Value* h = lookup(config_, {"model", "hidden_size"});
    if (h && h->is_integral() && h->as_int() > 0)
      return std::make_pair(h->as_int(), std::string("model.hidden_size"));
    return std::nullopt;
  }

  AutoResolution hidden(const std::string& rule, const FieldSpec& field) const {
    auto known = hidden_size();
    if (!known) return field_default(field, "hidden_size unknown here: the default");
    const int64_t h = known->first;
    const std::string hs = std::to_string(h);
    if (h > 3037000499) return {std::nullopt, "", known->second + " " + hs + " is too large"};
    if (rule == "hidden_squared")
      return {json::Value(h * h), "hidden_size^2 = " + hs + "^2, hidden_size from " + known->second,
              ""};
    if (rule == "hidden_x10")
      return {json::Value(10 * h),
              "10 * hidden_size = 10 * " + hs + ", hidden_size from " + known->second, ""};
    // HF computes 0.9 * h * h in floating point, left to right, then int().
    const double v = 0.9 * static_cast<double>(h) * static_cast<double>(h);
    return {json::Value(static_cast<int64_t>(v)),
            "int(0.9 * hidden_size^2) with hidden_size " + hs + " from " + known->second, ""};
  }

  ResolveContext context_;
  json::Value config_;
  // Shared by the copies of one resolver (std::function copies it); filled
  // on first use, so configs without "auto" in "aio" never touch the cache.
  struct AioSlot {
    std::unique_ptr<AioMeasurement> measurement;
  };
  std::shared_ptr<AioSlot> aio_;
};

}  // namespace

AutoResolver make_auto_resolver(const ResolveContext& context, const json::Value& config) {
  return Resolver(context, config);
}

}  // namespace dscore::config
