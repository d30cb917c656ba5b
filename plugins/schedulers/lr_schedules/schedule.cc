// The vtable entries shared by every schedule of the library (schedule.h):
// create under the C++ guard, point_at with group bounds and struct_size
// checks, destroy, first_iteration; and per-group parameter expansion.
#include "schedule.h"

#include <charconv>

namespace dscore::lr_schedules {
namespace {

using S = sdk::Shim<dscore_scheduler, Schedule>;

}  // namespace

std::string format_number(double v) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, result.ptr);
}

dscore_status create_schedule(CreateFn create, const dscore_create_args* args,
                              const dscore_scheduler_context* context, dscore_scheduler** out) {
  return sdk::guard(sdk::HostRef(args), [&] {
    if (context == nullptr || context->group_count == 0)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, "the scheduler context has no parameter groups");
    sdk::Params params(args);
    *out = reinterpret_cast<dscore_scheduler*>(create(params, *context));
  });
}

void destroy_schedule(dscore_scheduler* self) { S::destroy(self); }

dscore_status schedule_point_at(const dscore_scheduler* self, int64_t t, size_t group,
                                dscore_schedule_point* out) {
  return S::call(self, [&](const Schedule& s) {
    if (group >= s.group_count())
      throw sdk::Error(DSCORE_OUT_OF_RANGE, "group " + std::to_string(group) +
                                                " out of range: the "
                                                "schedule was created for " +
                                                std::to_string(s.group_count()) + " groups");
    using P = dscore_schedule_point;
    if (out == nullptr || !DSCORE_HAS_FIELD(out, P, lr))
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, "point_at: output point is NULL or too small");
    double beta1 = 0, beta2 = 0;
    uint32_t mask = DSCORE_HPARAM_LR | s.betas(t, group, &beta1, &beta2);
    out->lr = s.lr(t, group);
    if (DSCORE_HAS_FIELD(out, P, beta1) && (mask & DSCORE_HPARAM_BETA1)) out->beta1 = beta1;
    if (DSCORE_HAS_FIELD(out, P, beta2) && (mask & DSCORE_HPARAM_BETA2)) out->beta2 = beta2;
    out->set_mask = mask;
  });
}

int64_t schedule_first_iteration(const dscore_scheduler* self) {
  return S::self(self).first_iteration();
}

int64_t integer_at_least(const sdk::Params& params, const char* name, int64_t min) {
  const int64_t value = params.integer(name);
  if (value < min)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string(name) + " = " + std::to_string(value) +
                         " is out of range: it must be an integer >= " + std::to_string(min));
  return value;
}

std::vector<double> optimizer_lrs(const dscore_scheduler_context& context, const char* schedule,
                                  const char* param) {
  if (context.base_lrs == nullptr)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string(schedule) + " without \"" + param +
                         "\" uses the optimizer's lr, but the scheduler context has no base_lrs");
  return std::vector<double>(context.base_lrs, context.base_lrs + context.group_count);
}

bool log_warmup(const sdk::Params& params, const char* schedule) {
  const std::string type = params.string("warmup_type");
  if (type == "log" || type == "linear") return type == "log";
  params.host().log(
      DSCORE_LOG_WARNING, schedule,
      "Using unknown warmup_type: " + type + ". The increasing function is set to default (log)");
  return true;
}

std::vector<double> per_group(const sdk::Params& params, const char* name, size_t group_count) {
  std::vector<double> values = params.numbers(name);
  const dscore_named_value* v = params.find(name);
  if (v->type != DSCORE_VALUE_DOUBLE_ARRAY) return std::vector<double>(group_count, values[0]);
  if (values.size() != group_count)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string(name) + " has " + std::to_string(values.size()) +
                         " values but the optimizer has " + std::to_string(group_count) +
                         " parameter groups: give one number, or one value per group");
  return values;
}

}  // namespace dscore::lr_schedules
