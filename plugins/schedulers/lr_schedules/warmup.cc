// WarmupLR and WarmupDecayLR (docs/deepspeed-reference.md#warmuplr and
// docs/deepspeed-reference.md#warmupdecaylr): a log or linear
// warm-up from warmup_min_lr to warmup_max_lr over N = max(2,
// warmup_num_steps) iterations, then constant (WarmupLR) or a linear decay
// back to warmup_min_lr at total_num_steps (WarmupDecayLR). The arithmetic
// follows DeepSpeed's expression order so the values match it bit for bit.
#include <cmath>
#include <string>
#include <vector>

#include "schedule.h"

namespace dscore::lr_schedules {
namespace {

// The WarmupDecayLR schema is WarmupLR's plus total_num_steps; the test
// checks that the shared entries agree.
constexpr const char kWarmupLrSchema[] = R"json({
  "warmup_min_lr": {"type": "number_or_array", "default": 0.0, "auto": "default",
                    "doc": "lr at and before the first iteration; a list gives one value per parameter group"},
  "warmup_max_lr": {"type": "number_or_array", "default": 0.001, "auto": "default",
                    "doc": "lr at the end of warm-up (the optimizer's own lr is ignored, as in DeepSpeed)"},
  "warmup_num_steps": {"type": "int", "default": 1000, "auto": "default",
                       "doc": "warm-up length N; values below 2 are treated as 2"},
  "warmup_type": {"type": "string", "default": "log",
                  "doc": "\"log\" or \"linear\"; any other value warns and uses \"log\", as DeepSpeed"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"}
})json";
constexpr const char kWarmupDecayLrSchema[] = R"json({
  "warmup_min_lr": {"type": "number_or_array", "default": 0.0, "auto": "default",
                    "doc": "lr at and before the first iteration; a list gives one value per parameter group"},
  "warmup_max_lr": {"type": "number_or_array", "default": 0.001, "auto": "default",
                    "doc": "lr at the end of warm-up (the optimizer's own lr is ignored, as in DeepSpeed)"},
  "warmup_num_steps": {"type": "int", "default": 1000, "auto": "default",
                       "doc": "warm-up length N; values below 2 are treated as 2"},
  "warmup_type": {"type": "string", "default": "log",
                  "doc": "\"log\" or \"linear\"; any other value warns and uses \"log\", as DeepSpeed"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"},
  "total_num_steps": {"type": "int", "required": true, "auto": "train_steps",
                      "doc": "iteration at which the lr has decayed back to warmup_min_lr"}
})json";

class Warmup : public Schedule {
 public:
  // total_num_steps < 0 means no decay (WarmupLR).
  Warmup(const sdk::Params& p, const dscore_scheduler_context& context, const char* name,
         int64_t total_num_steps)
      : Schedule(p.host(), context.group_count, p.integer("last_batch_iteration")),
        total_num_steps_(total_num_steps) {
    min_lrs_ = per_group(p, "warmup_min_lr", context.group_count);
    std::vector<double> max_lrs = per_group(p, "warmup_max_lr", context.group_count);
    for (size_t g = 0; g < max_lrs.size(); ++g) delta_lrs_.push_back(max_lrs[g] - min_lrs_[g]);
    int64_t requested = p.integer("warmup_num_steps");
    warmup_num_steps_ = requested < 2 ? 2 : requested;
    std::string type = p.string("warmup_type");
    if (type != "log" && type != "linear") {
      host().log(DSCORE_LOG_WARNING, name,
                 "Using unknown warmup_type: " + type +
                     ". The increasing function is set to default (log)");
      type = "log";
    }
    log_warmup_ = type == "log";
    inverse_log_warm_up_ = 1.0 / std::log(static_cast<double>(warmup_num_steps_));
    if (total_num_steps_ >= 0 && total_num_steps_ < warmup_num_steps_)
      host().log(DSCORE_LOG_WARNING, name,
                 "total_num_steps " + std::to_string(total_num_steps_) +
                     " is less than warmup_num_steps " + std::to_string(requested));
  }

  double lr(int64_t t, size_t group) const override {
    if (t < 0) return min_lrs_[group];  // the value the constructor applies
    return min_lrs_[group] + delta_lrs_[group] * gamma(t);
  }

 private:
  double gamma(int64_t t) const {
    if (t < warmup_num_steps_) {
      if (log_warmup_) return inverse_log_warm_up_ * std::log(static_cast<double>(t + 1));
      return static_cast<double>(t) / static_cast<double>(warmup_num_steps_);
    }
    if (total_num_steps_ < 0) return 1.0;
    double remaining = static_cast<double>(total_num_steps_ - t);
    double span = std::max(1.0, static_cast<double>(total_num_steps_ - warmup_num_steps_));
    return std::max(0.0, remaining / span);
  }

  std::vector<double> min_lrs_;
  std::vector<double> delta_lrs_;
  int64_t warmup_num_steps_ = 2;
  bool log_warmup_ = true;
  double inverse_log_warm_up_ = 0;
  int64_t total_num_steps_;
};

Schedule* create_warmup_lr(const sdk::Params& p, const dscore_scheduler_context& context) {
  return new Warmup(p, context, "WarmupLR", -1);
}

Schedule* create_warmup_decay_lr(const sdk::Params& p, const dscore_scheduler_context& context) {
  if (!p.has("total_num_steps"))
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "WarmupDecayLR needs \"total_num_steps\" (the iteration at which the lr is "
                     "back at warmup_min_lr); set it or use \"auto\" for the run's train_steps");
  int64_t total = p.integer("total_num_steps");
  if (total < 0)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "total_num_steps = " + std::to_string(total) + " must be >= 0");
  return new Warmup(p, context, "WarmupDecayLR", total);
}

constexpr dscore_scheduler_vtable kWarmupLrVtable = make_vtable<&create_warmup_lr>();
constexpr dscore_scheduler_vtable kWarmupDecayLrVtable = make_vtable<&create_warmup_decay_lr>();

}  // namespace

const dscore_plugin_descriptor kWarmupLrDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_SCHEDULER,
    "WarmupLR",
    "0.1.0",
    "log or linear warm-up from warmup_min_lr to warmup_max_lr, then constant (DeepSpeed WarmupLR)",
    0,
    kWarmupLrSchema,
    &kWarmupLrVtable};

const dscore_plugin_descriptor kWarmupDecayLrDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_SCHEDULER,
    "WarmupDecayLR",
    "0.1.0",
    "WarmupLR, then linear decay to warmup_min_lr at total_num_steps (DeepSpeed WarmupDecayLR)",
    0,
    kWarmupDecayLrSchema,
    &kWarmupDecayLrVtable};

}  // namespace dscore::lr_schedules
