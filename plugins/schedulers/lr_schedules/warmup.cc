// WarmupLR and WarmupDecayLR (docs/deepspeed-reference.md#warmuplr and
// docs/deepspeed-reference.md#warmupdecaylr): a log or linear
// warm-up from warmup_min_lr to warmup_max_lr over N = max(2,
// warmup_num_steps) iterations, then constant (WarmupLR) or a linear decay
// back to warmup_min_lr at total_num_steps (WarmupDecayLR). WarmupLR's
// warmup_max_lr defaults to each group's optimizer lr, WarmupDecayLR's to
// 0.001 (DeepSpeed 0.19). The arithmetic follows DeepSpeed's expression
// order so the values match it bit for bit.
#include <cmath>
#include <string>
#include <vector>

#include "schedule.h"

namespace dscore::lr_schedules {
namespace {

// The two schemas differ only in warmup_max_lr's default and in
// total_num_steps; the test checks that the shared entries agree.
constexpr const char kWarmupLrSchema[] = R"json({
  "warmup_min_lr": {"type": "number_or_array", "default": 0.0, "auto": "default",
                    "doc": "lr at and before the first iteration; a list gives one value per parameter group"},
  "warmup_max_lr": {"type": "number_or_array", "auto": "default",
                    "doc": "lr at the end of warm-up; default: each parameter group's optimizer lr"},
  "warmup_num_steps": {"type": "int", "default": 1000, "min": 1, "auto": "default",
                       "doc": "warm-up length N (DeepSpeed raises ValueError below 1); 1 is treated as 2"},
  "warmup_type": {"type": "string", "default": "log",
                  "doc": "\"log\" or \"linear\"; any other value warns and uses \"log\", as DeepSpeed"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"}
})json";
constexpr const char kWarmupDecayLrSchema[] = R"json({
  "warmup_min_lr": {"type": "number_or_array", "default": 0.0, "auto": "default",
                    "doc": "lr at and before the first iteration; a list gives one value per parameter group"},
  "warmup_max_lr": {"type": "number_or_array", "default": 0.001, "auto": "optimizer_lr",
                    "doc": "lr at the end of warm-up (not the optimizer's lr, as in DeepSpeed; \"auto\": the optimizer's lr, as HF means it)"},
  "warmup_num_steps": {"type": "int", "default": 1000, "min": 1, "auto": "default",
                       "doc": "warm-up length N (DeepSpeed raises ValueError below 1); 1 is treated as 2"},
  "warmup_type": {"type": "string", "default": "log",
                  "doc": "\"log\" or \"linear\"; any other value warns and uses \"log\", as DeepSpeed"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"},
  "total_num_steps": {"type": "int", "required": true, "min": 0, "auto": "train_steps",
                      "doc": "iteration at which the lr has decayed back to warmup_min_lr"}
})json";

class Warmup : public Schedule {
 public:
  // total_num_steps < 0 means no decay (WarmupLR).
  Warmup(const sdk::Params& p, const dscore_scheduler_context& context, const char* name,
         int64_t total_num_steps)
      : Schedule(p.host(), context.group_count, p.integer("last_batch_iteration")),
        total_num_steps_(total_num_steps) {
    const int64_t requested = integer_at_least(p, "warmup_num_steps", 1);
    min_lrs_ = per_group(p, "warmup_min_lr", context.group_count);
    // WarmupLR without warmup_max_lr warms up to each group's optimizer lr.
    std::vector<double> max_lrs = p.has("warmup_max_lr")
                                      ? per_group(p, "warmup_max_lr", context.group_count)
                                      : optimizer_lrs(context, name, "warmup_max_lr");
    for (size_t g = 0; g < max_lrs.size(); ++g) delta_lrs_.push_back(max_lrs[g] - min_lrs_[g]);
    warmup_num_steps_ = requested < 2 ? 2 : requested;
    log_warmup_ = log_warmup(p, name);
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
  // DeepSpeed accepts a negative total (the lr drops to warmup_min_lr after warm-up); dscore
  // refuses it (docs/deepspeed-differences.md).
  return new Warmup(p, context, "WarmupDecayLR", integer_at_least(p, "total_num_steps", 0));
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
