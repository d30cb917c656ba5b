// What every schedule in the dscore-lr-schedules library shares: the
// Schedule base class (a pure function of t and the group), the one vtable
// all schedules use, and per-group parameter expansion. A new schedule is one
// file defining a Schedule subclass and its descriptor, plus a line in
// library.cc.
#pragma once

#include <dscore/scheduler.h>
#include <dscore/cpp/instance.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dscore::lr_schedules {

class Schedule : public sdk::Instance {
 public:
  Schedule(sdk::HostRef host, size_t group_count, int64_t first_iteration)
      : Instance(host), group_count_(group_count), first_iteration_(first_iteration) {}

  size_t group_count() const { return group_count_; }
  int64_t first_iteration() const { return first_iteration_; }

  // The learning rate of `group` (< group_count) at iteration t.
  virtual double lr(int64_t t, size_t group) const = 0;
  // Momentum-cycling schedules (OneCycle) override this, set the
  // DSCORE_HPARAM_BETA* bits they provide and fill beta1/beta2.
  virtual uint32_t betas(int64_t t, size_t group, double* beta1, double* beta2) const {
    (void)t, (void)group, (void)beta1, (void)beta2;
    return 0;
  }

 private:
  size_t group_count_;
  int64_t first_iteration_;
};

using CreateFn = Schedule* (*)(const sdk::Params& params, const dscore_scheduler_context& context);

// The shared vtable entries (schedule.cc).
void destroy_schedule(dscore_scheduler* self);
dscore_status schedule_point_at(const dscore_scheduler* self, int64_t t, size_t group,
                                dscore_schedule_point* out);
int64_t schedule_first_iteration(const dscore_scheduler* self);
dscore_status create_schedule(CreateFn create, const dscore_create_args* args,
                              const dscore_scheduler_context* context, dscore_scheduler** out);

template <CreateFn F>
dscore_status create_with(const dscore_create_args* args, const dscore_scheduler_context* context,
                          dscore_scheduler** out) {
  return create_schedule(F, args, context, out);
}

// The vtable of a schedule whose create function is F.
template <CreateFn F>
constexpr dscore_scheduler_vtable make_vtable() {
  return dscore_scheduler_vtable{sizeof(dscore_scheduler_vtable),
                                 &create_with<F>,
                                 &destroy_schedule,
                                 &schedule_point_at,
                                 &schedule_first_iteration,
                                 nullptr,
                                 nullptr};
}

// A parameter that is either one number (same for every group) or a list
// with exactly one value per parameter group (DeepSpeed's _format_param).
// Throws INVALID_ARGUMENT naming the parameter when the length is wrong.
std::vector<double> per_group(const sdk::Params& params, const char* name, size_t group_count);

// The integer parameter `name`, which must be >= `min`; otherwise throws
// INVALID_ARGUMENT naming the parameter, its value and the valid range (the
// same bound the schema's "min" enforces at config time, checked again for
// hosts that skip validation).
int64_t integer_at_least(const sdk::Params& params, const char* name, int64_t min);

// The optimizer's lr of every group (the context's base_lrs), for a schedule
// whose `param` defaults to it; throws INVALID_ARGUMENT when the context has
// none.
std::vector<double> optimizer_lrs(const dscore_scheduler_context& context, const char* schedule,
                                  const char* param);

// warmup_type: true for "log", false for "linear"; any other value logs
// DeepSpeed's warning and means "log" (WarmupLR, WarmupDecayLR and, since
// DeepSpeed 0.19.4, WarmupCosineLR).
bool log_warmup(const sdk::Params& params, const char* schedule);

// Shortest round-trip text of a number, for messages.
std::string format_number(double v);

// The descriptors, one per schedule file; library.cc lists them.
extern const dscore_plugin_descriptor kWarmupLrDescriptor;        // warmup.cc
extern const dscore_plugin_descriptor kWarmupDecayLrDescriptor;   // warmup.cc
extern const dscore_plugin_descriptor kWarmupCosineLrDescriptor;  // warmup_cosine.cc
extern const dscore_plugin_descriptor kOneCycleDescriptor;        // one_cycle.cc
extern const dscore_plugin_descriptor kLrRangeTestDescriptor;     // lr_range_test.cc

}  // namespace dscore::lr_schedules
