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
//
// The hidden_* rules take hidden_size from the ResolveContext (the model
// plugin's answer) or else from "model.hidden_size" in the file; when neither
// is known they fall back to the field's default and say so.
#include "core/config/auto_rules.h"

#include "core/base/strings.h"
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

class Resolver {
 public:
  Resolver(const ResolveContext& context, const json::Value& config)
      : context_(context), config_(config) {}

  AutoResolution operator()(const std::string& rule, const FieldSpec& field,
                            const std::string&) const {
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
};

}  // namespace

AutoResolver make_auto_resolver(const ResolveContext& context, const json::Value& config) {
  return Resolver(context, config);
}

}  // namespace dscore::config
