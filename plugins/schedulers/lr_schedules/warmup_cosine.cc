// WarmupCosineLR (docs/deepspeed-reference.md#warmupcosinelr): the optimizer's own lr (context
// base_lrs, DeepSpeed's org_lr) times a ratio that warms up (log or linear)
// from warmup_min_ratio to 1 over N = max(2, warmup_num_steps) iterations,
// then follows a half cosine down to cos_min_ratio at total_num_steps and
// stays there (DeepSpeed 0.19.3 on clamps the cosine's progress to 1). Every
// group is 0 at construction and an unknown warmup_type warns and means
// "log", as in DeepSpeed 0.19. Expression order follows DeepSpeed's
// get_lr_ratio so the values match it bit for bit.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "schedule.h"

namespace dscore::lr_schedules {
namespace {

constexpr const char kWarmupCosineSchema[] = R"json({
  "total_num_steps": {"type": "int", "required": true, "auto": "train_steps",
                      "doc": "iteration at which the cosine reaches cos_min_ratio (the lr stays there afterwards)"},
  "warmup_min_ratio": {"type": "number", "default": 0.0, "min": 0, "auto": "default",
                       "doc": "lr / optimizer lr at the first iteration"},
  "warmup_num_steps": {"type": "int", "default": 1000, "min": 1, "auto": "default",
                       "doc": "warm-up length N (DeepSpeed raises ValueError below 1); 1 is treated as 2"},
  "cos_min_ratio": {"type": "number", "default": 0.0001, "min": 0, "auto": "default",
                    "doc": "lr / optimizer lr at total_num_steps"},
  "warmup_type": {"type": "string", "default": "log",
                  "doc": "\"log\" or \"linear\"; any other value warns and uses \"log\", as DeepSpeed"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"}
})json";

class WarmupCosine : public Schedule {
 public:
  WarmupCosine(const sdk::Params& p, const dscore_scheduler_context& context)
      : Schedule(p.host(), context.group_count, p.integer("last_batch_iteration")),
        peak_lrs_(context.base_lrs, context.base_lrs + context.group_count) {
    total_num_steps_ = p.integer("total_num_steps");
    const int64_t requested = integer_at_least(p, "warmup_num_steps", 1);
    warmup_num_steps_ = std::max<int64_t>(2, requested);
    warmup_min_ratio_ = p.number("warmup_min_ratio");
    cos_min_ratio_ = p.number("cos_min_ratio");
    log_warmup_ = log_warmup(p, "WarmupCosineLR");
    inverse_log_warm_up_ = 1.0 / std::log(static_cast<double>(warmup_num_steps_));
    if (total_num_steps_ < warmup_num_steps_)
      host().log(DSCORE_LOG_WARNING, "WarmupCosineLR",
                 "total_num_steps " + std::to_string(total_num_steps_) +
                     " is less than warmup_num_steps " + std::to_string(requested) +
                     ": after warm-up the lr drops straight to cos_min_ratio");
  }

  double lr(int64_t t, size_t group) const override {
    if (t < 0) return 0.0;  // what the constructor applies to every group
    return peak_lrs_[group] * ratio(t);
  }

 private:
  // DeepSpeed's get_lr_ratio, in its expression order.
  double ratio(int64_t t) const {
    if (t < warmup_num_steps_) {
      const double w = log_warmup_
                           ? inverse_log_warm_up_ * std::log(static_cast<double>(t + 1))
                           : static_cast<double>(t) / static_cast<double>(warmup_num_steps_);
      return warmup_min_ratio_ + w * (1.0 - warmup_min_ratio_);
    }
    // Past total_num_steps the progress is held at 1 (the ratio stays at
    // cos_min_ratio); with total_num_steps <= N every step after warm-up is there.
    const double real_last_step = static_cast<double>(t - warmup_num_steps_ + 1);
    const double real_total_steps =
        static_cast<double>(std::max<int64_t>(1, total_num_steps_ - warmup_num_steps_));
    const double cosine_progress = std::min(1.0, real_last_step / real_total_steps);
    const double cosine = (1 + std::cos(std::numbers::pi * cosine_progress)) / 2;
    return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * cosine);
  }

  std::vector<double> peak_lrs_;
  int64_t total_num_steps_ = 0;
  int64_t warmup_num_steps_ = 2;
  double warmup_min_ratio_ = 0;
  double cos_min_ratio_ = 0;
  bool log_warmup_ = true;
  double inverse_log_warm_up_ = 0;
};

Schedule* create_warmup_cosine(const sdk::Params& p, const dscore_scheduler_context& context) {
  if (!p.has("total_num_steps"))
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "WarmupCosineLR needs \"total_num_steps\" (the iteration at which the cosine "
                     "ends); set it or use \"auto\" for the run's train_steps");
  if (context.base_lrs == nullptr)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "WarmupCosineLR scales the optimizer's lr, but the scheduler context has no "
                     "base_lrs");
  return new WarmupCosine(p, context);
}

constexpr dscore_scheduler_vtable kWarmupCosineVtable = make_vtable<&create_warmup_cosine>();

}  // namespace

const dscore_plugin_descriptor kWarmupCosineLrDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_SCHEDULER,
    "WarmupCosineLR",
    "0.1.0",
    "warm-up to the optimizer's lr, then cosine decay to cos_min_ratio (DeepSpeed WarmupCosineLR)",
    0,
    kWarmupCosineSchema,
    &kWarmupCosineVtable};

}  // namespace dscore::lr_schedules
