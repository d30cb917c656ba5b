// LRRangeTest (docs/deepspeed-reference.md#lrrangetest): the lr grows from lr_range_test_min_lr
// by lr_range_test_step_rate per lr_range_test_step_size iterations,
// continuously or in stairs: lr = min * (1 + rate * i), i = (t + 1) / size
// or floor of it. The constructor value (t = -1) is min, which the formula
// also gives; DeepSpeed's expression order is kept.
#include <cmath>
#include <string>
#include <vector>

#include "schedule.h"

namespace dscore::lr_schedules {
namespace {

constexpr const char kLrRangeTestSchema[] = R"json({
  "lr_range_test_min_lr": {"type": "number_or_array", "default": 0.001,
                           "doc": "lr at the first iteration; a list gives one value per parameter group"},
  "lr_range_test_step_size": {"type": "int", "default": 2000, "min": 1,
                              "doc": "iterations per unit of increase, >= 1 (DeepSpeed raises ValueError below 1)"},
  "lr_range_test_step_rate": {"type": "number", "default": 1.0,
                              "doc": "increase per step_size: lr = min * (1 + rate * iterations / step_size)"},
  "lr_range_test_staircase": {"type": "bool", "default": false,
                              "doc": "increase in stairs of step_size iterations instead of continuously"},
  "last_batch_iteration": {"type": "int", "default": -1,
                           "doc": "the iteration counter at construction (-1 = not started)"}
})json";

class LrRangeTest : public Schedule {
 public:
  LrRangeTest(const sdk::Params& p, const dscore_scheduler_context& context)
      : Schedule(p.host(), context.group_count, p.integer("last_batch_iteration")),
        min_lrs_(per_group(p, "lr_range_test_min_lr", context.group_count)),
        step_size_(static_cast<double>(p.integer("lr_range_test_step_size"))),
        step_rate_(p.number("lr_range_test_step_rate")),
        staircase_(p.boolean("lr_range_test_staircase")) {}

  double lr(int64_t t, size_t group) const override {
    if (t < -1) t = -1;  // before the start the constructor's value holds
    const double interval = static_cast<double>(t + 1) / step_size_;
    const double increase = 1 + step_rate_ * (staircase_ ? std::floor(interval) : interval);
    return min_lrs_[group] * increase;
  }

 private:
  std::vector<double> min_lrs_;
  double step_size_;
  double step_rate_;
  bool staircase_;
};

Schedule* create_lr_range_test(const sdk::Params& p, const dscore_scheduler_context& context) {
  integer_at_least(p, "lr_range_test_step_size", 1);  // DeepSpeed: ValueError below 1
  return new LrRangeTest(p, context);
}

constexpr dscore_scheduler_vtable kLrRangeTestVtable = make_vtable<&create_lr_range_test>();

}  // namespace

const dscore_plugin_descriptor kLrRangeTestDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_SCHEDULER,
    "LRRangeTest",
    "0.1.0",
    "lr growing linearly (or in stairs) from lr_range_test_min_lr (DeepSpeed LRRangeTest)",
    0,
    kLrRangeTestSchema,
    &kLrRangeTestVtable};

}  // namespace dscore::lr_schedules
