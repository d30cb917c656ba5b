// The learning-rate schedule as the engine drives it. The engine owns the
// iteration counter t (DeepSpeed's last_batch_iteration): it starts at the
// scheduler's first_iteration() (normally -1, the value DeepSpeed's
// constructor applies), the k-th applied update uses the point at t = k - 2,
// and t advances only after an applied update — never after a skipped one.
// Without a scheduler every update uses the optimizer's own lr.
#pragma once

#include <dscore/scheduler.h>

#include <memory>

#include "core/base/status.h"
#include "core/plugin_host/instances.h"

namespace dscore {

class LrSchedule {
 public:
  LrSchedule(std::unique_ptr<plugin_host::SchedulerInstance> scheduler, double base_lr);

  // The point the next update uses (group 0; dscore runs one param group).
  Result<dscore_schedule_point> current() const;
  void advance() { ++t_; }
  int64_t iteration() const { return t_; }
  void set_iteration(int64_t t) { t_ = t; }
  bool has_scheduler() const { return scheduler_ != nullptr; }
  plugin_host::SchedulerInstance* scheduler() { return scheduler_.get(); }

 private:
  std::unique_ptr<plugin_host::SchedulerInstance> scheduler_;
  double base_lr_;
  int64_t t_ = -1;
};

}  // namespace dscore
