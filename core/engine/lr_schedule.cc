#include "core/engine/lr_schedule.h"

namespace dscore {

LrSchedule::LrSchedule(std::unique_ptr<plugin_host::SchedulerInstance> scheduler, double base_lr)
    : scheduler_(std::move(scheduler)), base_lr_(base_lr) {
  if (scheduler_) t_ = scheduler_->first_iteration();
}

Result<dscore_schedule_point> LrSchedule::current() const {
  if (!scheduler_) {
    dscore_schedule_point point{};
    point.struct_size = sizeof point;
    point.set_mask = DSCORE_HPARAM_LR;
    point.lr = base_lr_;
    return point;
  }
  return scheduler_->point_at(t_, 0);
}

}  // namespace dscore
