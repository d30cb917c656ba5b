// OneCycle (docs/deepspeed-reference.md#onecycle): one triangular cycle of the lr between
// cycle_min_lr and cycle_max_lr over S = first + second step sizes, with
// beta1 cycled inversely between cycle_max_mom and cycle_min_mom and beta2
// forced to 0.99; after the cycle a continuous (never staircase) decay of the
// lr and a growth of beta1. Stair counts hold the cycle's lr and beta1 flat
// over equal parts of each half (DeepSpeed 0.19). The constructor value
// (t < 0) is lr = min and betas = (cycle_min_mom, 0.99), as DeepSpeed's
// constructor sets them. Expression order follows DeepSpeed so the values
// match it bit for bit.
#include <cmath>
#include <string>
#include <vector>

#include "schedule.h"

namespace dscore::lr_schedules {
namespace {

constexpr const char kOneCycleSchema[] = R"json({
  "cycle_min_lr": {"type": "number_or_array", "required": true,
                   "doc": "lr at the start and end of the cycle; a list gives one value per parameter group"},
  "cycle_max_lr": {"type": "number_or_array", "required": true,
                   "doc": "lr at the peak of the cycle (after cycle_first_step_size iterations)"},
  "decay_lr_rate": {"type": "number", "default": 0.0,
                    "doc": "after the cycle: lr = cycle_min_lr / (1 + decay_lr_rate * d / decay_step_size); 0 = constant"},
  "cycle_first_step_size": {"type": "int", "default": 2000, "min": 1,
                            "doc": "iterations of the increasing half of the cycle (DeepSpeed raises ValueError below 1)"},
  "cycle_second_step_size": {"type": "int", "min": 0,
                             "doc": "iterations of the decreasing half, >= 0 (default: cycle_first_step_size)"},
  "cycle_first_stair_count": {"type": "int", "default": 0, "min": 0,
                              "doc": "stairs in the increasing half: lr and momentum change only this many times; 0 = every iteration"},
  "cycle_second_stair_count": {"type": "int", "min": 0,
                               "doc": "stairs in the decreasing half (default: cycle_first_stair_count)"},
  "decay_step_size": {"type": "int", "default": 0, "min": 0,
                      "doc": "iterations per unit of decay after the cycle; 0 = no decay"},
  "cycle_momentum": {"type": "bool", "default": true,
                     "doc": "cycle beta1 inversely to the lr (and force beta2 to 0.99)"},
  "cycle_min_mom": {"type": "number_or_array", "default": 0.8,
                    "doc": "beta1 at the peak of the lr (and the value the constructor sets)"},
  "cycle_max_mom": {"type": "number_or_array", "default": 0.9,
                    "doc": "beta1 at the start and end of the cycle"},
  "decay_mom_rate": {"type": "number", "default": 0.0,
                     "doc": "after the cycle: beta1 = cycle_max_mom * (1 + decay_mom_rate * d / decay_step_size)"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"}
})json";

// DeepSpeed forces beta2 to this value whenever it cycles momentum.
constexpr double kCycledBeta2 = 0.99;

class OneCycle : public Schedule {
 public:
  OneCycle(const sdk::Params& p, const dscore_scheduler_context& context)
      : Schedule(p.host(), context.group_count, p.integer("last_batch_iteration")) {
    const size_t groups = context.group_count;
    first_step_size_ = static_cast<double>(p.integer("cycle_first_step_size"));
    second_step_size_ = p.has("cycle_second_step_size")
                            ? static_cast<double>(p.integer("cycle_second_step_size"))
                            : first_step_size_;
    total_size_ = first_step_size_ + second_step_size_;
    step_ratio_ = first_step_size_ / total_size_;
    first_stair_count_ = p.integer("cycle_first_stair_count");
    second_stair_count_ = p.has("cycle_second_stair_count") ? p.integer("cycle_second_stair_count")
                                                            : first_stair_count_;
    min_lrs_ = per_group(p, "cycle_min_lr", groups);
    max_lrs_ = per_group(p, "cycle_max_lr", groups);
    decay_lr_rate_ = p.number("decay_lr_rate");
    decay_step_size_ = p.integer("decay_step_size");
    cycle_momentum_ = p.boolean("cycle_momentum");
    min_moms_ = per_group(p, "cycle_min_mom", groups);
    max_moms_ = per_group(p, "cycle_max_mom", groups);
    decay_mom_rate_ = p.number("decay_mom_rate");
    // DeepSpeed's math.isclose(x, 0) is true only for exactly 0.
    skip_lr_decay_ = decay_step_size_ == 0 || decay_lr_rate_ == 0.0;
    skip_mom_decay_ = decay_step_size_ == 0 || decay_mom_rate_ == 0.0;
  }

  double lr(int64_t t, size_t group) const override {
    if (t < 0) return min_lrs_[group];  // the constructor's value
    if (static_cast<double>(t) < total_size_)
      return min_lrs_[group] + (max_lrs_[group] - min_lrs_[group]) * scale_factor(t);
    if (skip_lr_decay_) return min_lrs_[group];
    return min_lrs_[group] / (1 + decay_lr_rate_ * decay_interval(t));
  }

  uint32_t betas(int64_t t, size_t group, double* beta1, double* beta2) const override {
    if (!cycle_momentum_) return 0;
    *beta2 = kCycledBeta2;
    if (t < 0) {
      *beta1 = min_moms_[group];  // the constructor's value
    } else if (static_cast<double>(t) < total_size_) {
      *beta1 = max_moms_[group] - (max_moms_[group] - min_moms_[group]) * scale_factor(t);
    } else if (skip_mom_decay_) {
      *beta1 = max_moms_[group];
    } else {
      *beta1 = max_moms_[group] * (1 + decay_mom_rate_ * decay_interval(t));
    }
    return DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2;
  }

 private:
  // Position in the cycle: 0 at the ends, 1 at the peak.
  double scale_factor(int64_t t) const {
    const double batch_iteration = static_cast<double>(t + 1);
    const double cycle = std::floor(1 + batch_iteration / total_size_);
    const double x = 1. + batch_iteration / total_size_ - cycle;
    double scale;
    int64_t stair_count;
    if (x <= step_ratio_) {
      scale = x / step_ratio_;
      stair_count = first_stair_count_;
    } else {
      scale = (x - 1) / (step_ratio_ - 1);
      stair_count = second_stair_count_;
    }
    if (stair_count <= 0) return scale;
    // Stairs are counted from the integer position in the cycle, not from
    // `scale` (whose rounding at a half's end could drop a whole stair), as
    // DeepSpeed does; the half is the one `x` chose for the count.
    const double cycle_iteration = std::fmod(batch_iteration, total_size_);
    const double stairs = static_cast<double>(stair_count);
    const double stair_position =
        cycle_iteration <= first_step_size_
            ? cycle_iteration * stairs / first_step_size_
            : (total_size_ - cycle_iteration) * stairs / second_step_size_;
    return std::floor(stair_position) / stairs;
  }
  double decay_interval(int64_t t) const {
    const double decay_batch_iteration = static_cast<double>(t) - total_size_ + 1;
    return decay_batch_iteration / static_cast<double>(decay_step_size_);
  }

  double first_step_size_ = 0;
  double second_step_size_ = 0;
  double total_size_ = 0;
  double step_ratio_ = 0;
  int64_t first_stair_count_ = 0;
  int64_t second_stair_count_ = 0;
  std::vector<double> min_lrs_, max_lrs_, min_moms_, max_moms_;
  double decay_lr_rate_ = 0;
  int64_t decay_step_size_ = 0;
  bool cycle_momentum_ = true;
  double decay_mom_rate_ = 0;
  bool skip_lr_decay_ = true;
  bool skip_mom_decay_ = true;
};

Schedule* create_one_cycle(const sdk::Params& p, const dscore_scheduler_context& context) {
  for (const char* required : {"cycle_min_lr", "cycle_max_lr"})
    if (!p.has(required))
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       std::string("OneCycle needs \"") + required + "\" (the cycle's lr bounds)");
  // DeepSpeed 0.19 raises ValueError for a first half <= 0 and a second half < 0; dscore also
  // refuses negative stair counts and decay_step_size (docs/deepspeed-differences.md).
  integer_at_least(p, "cycle_first_step_size", 1);
  for (const char* name : {"cycle_second_step_size", "cycle_first_stair_count",
                           "cycle_second_stair_count", "decay_step_size"})
    if (p.has(name)) integer_at_least(p, name, 0);
  return new OneCycle(p, context);
}

constexpr dscore_scheduler_vtable kOneCycleVtable = make_vtable<&create_one_cycle>();

}  // namespace

const dscore_plugin_descriptor kOneCycleDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_SCHEDULER,
    "OneCycle",
    "0.1.0",
    "one lr cycle with inverse momentum cycling, then decay (DeepSpeed OneCycle)",
    0,
    kOneCycleSchema,
    &kOneCycleVtable};

}  // namespace dscore::lr_schedules
