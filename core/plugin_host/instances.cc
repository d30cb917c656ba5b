// Optimizer, scheduler and monitor instances (instances.h) and the shared
// creation steps (instance_common.h). Every call into the plugin goes
// through call.h; optional vtable entries are read only when struct_size
// covers them.
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <set>

#include "core/plugin_host/call.h"
#include "core/plugin_host/instance_common.h"
#include "core/plugin_host/library.h"

namespace dscore::plugin_host {

// ------------------------------------------------------------------ common

namespace detail {

Status prepare_create(const PluginInfo& info, dscore_plugin_kind kind) {
  DSCORE_CHECK(info.descriptor != nullptr && info.library != nullptr,
               "PluginInfo of " + info.display() + " does not come from a registry");
  if (info.kind != kind) {
    return Status(DSCORE_INVALID_ARGUMENT, info.display() + " is a " + kind_name(info.kind) +
                                               " plugin, not a " + kind_name(kind) + " plugin");
  }
  return info.library->ensure_initialized();
}

std::shared_ptr<HostContext> host_of(const InstanceContext& context) {
  return context.host ? context.host : std::make_shared<HostContext>();
}

dscore_create_args make_create_args(const ValidatedParams& params, const InstanceContext& context,
                                    HostContext& host) {
  dscore_create_args args{};
  args.struct_size = sizeof(dscore_create_args);
  args.params = params.data();
  args.param_count = params.size();
  args.params_json = params.raw_json().c_str();
  args.rank = context.rank;
  args.world_size = context.world_size;
  args.local_rank = context.local_rank;
  args.seed = context.seed;
  args.context = host.handle();
  args.flags = context.describe_only ? DSCORE_CREATE_DESCRIBE_ONLY : 0u;
  return args;
}

Status null_handle_error(const PluginInfo& info) {
  return Status(DSCORE_INTERNAL, info.display() +
                                     " create returned OK but no instance (the handle is NULL); "
                                     "a bug in the plugin");
}

dscore_status append_to_string(void* ctx, const void* data, size_t size) {
  try {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), size);
    return DSCORE_OK;
  } catch (...) {
    return DSCORE_RESOURCE_EXHAUSTED;
  }
}

}  // namespace detail

namespace {

using detail::vtable_of;

Status missing_load_extra(const PluginInfo& info) {
  return Status(DSCORE_FAILED_PRECONDITION,
                info.display() +
                    " has no load_extra_state, but the checkpoint holds extra state "
                    "for it; was the checkpoint written by another plugin version?");
}

}  // namespace

// --------------------------------------------------------------- optimizer

Result<std::unique_ptr<OptimizerInstance>> OptimizerInstance::create(
    const PluginInfo& info, const ValidatedParams& params, const InstanceContext& context) {
  DSCORE_RETURN_IF_ERROR(detail::prepare_create(info, DSCORE_KIND_OPTIMIZER));
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info);
  const std::string who = info.display();
  std::shared_ptr<HostContext> host = detail::host_of(context);
  dscore_create_args args = detail::make_create_args(params, context, *host);
  dscore_optimizer* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(
      call_plugin(*host, who, "create", [&] { return vt->create(&args, &handle); }));
  if (handle == nullptr) return detail::null_handle_error(info);
  std::unique_ptr<OptimizerInstance> instance(new OptimizerInstance(info, handle, host));

  const dscore_optimizer_state_slot* const* slots = nullptr;
  size_t count = 0;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host, who, "state_slots",
                                     [&] { return vt->state_slots(handle, &slots, &count); }));
  if (count > 0 && slots == nullptr)
    return Status(DSCORE_INTERNAL, who + " state_slots returned " + std::to_string(count) +
                                       " slots but a NULL array");
  const bool half_precondition = DSCORE_HAS_FIELD(vt, dscore_optimizer_vtable, precondition) &&
                                 ((vt->preconditions == nullptr) != (vt->precondition == nullptr));
  if (half_precondition)
    return Status(DSCORE_INTERNAL, who +
                                       " sets only one of preconditions and precondition; "
                                       "the ABI asks for both or neither");
  std::set<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const dscore_optimizer_state_slot* s = slots[i];
    std::string at = who + " state slot " + std::to_string(i);
    if (s == nullptr) return Status(DSCORE_INTERNAL, at + " is NULL");
    if (!DSCORE_HAS_FIELD(s, dscore_optimizer_state_slot, initial_value))
      return Status(DSCORE_INTERNAL, at + " has struct_size " + std::to_string(s->struct_size) +
                                         ", smaller than ABI 1.0's dscore_optimizer_state_slot");
    if (s->name == nullptr || s->name[0] == '\0')
      return Status(DSCORE_INTERNAL, at + " has an empty name");
    at += " ('" + std::string(s->name) + "')";
    if (!names.insert(s->name).second)
      return Status(DSCORE_INTERNAL, at + ": the name is declared twice; slot names are "
                                          "checkpoint keys and must be unique");
    if (sdk::dtype_size(s->dtype) == 0)
      return Status(DSCORE_INTERNAL, at + " has unsupported dtype " + std::to_string(s->dtype));
    if (s->elements_per_param < 1)
      return Status(DSCORE_INTERNAL, at + " has elements_per_param 0; it must be >= 1");
    instance->slots_.push_back({s->name, s->dtype, s->elements_per_param, s->initial_value});
  }
  return instance;
}

OptimizerInstance::~OptimizerInstance() {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  call_plugin_void(*host_, info_.display(), "destroy", [&] { vt->destroy(handle_); });
}

Status OptimizerInstance::step(const dscore_optimizer_step_args& args) {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  return call_plugin(*host_, info_.display(), "step", [&] { return vt->step(handle_, &args); });
}

Result<bool> OptimizerInstance::wants_reduced_gradients(int64_t step) const {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_optimizer_vtable, wants_reduced_gradients) ||
      vt->wants_reduced_gradients == nullptr)
    return true;
  auto answer = call_plugin_value<int32_t>(*host_, info_.display(), "wants_reduced_gradients", [&] {
    return vt->wants_reduced_gradients(handle_, step);
  });
  if (!answer.ok()) return answer.status();
  return *answer != 0;
}

bool OptimizerInstance::has_precondition() const {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_optimizer_vtable, precondition) &&
         vt->precondition != nullptr && vt->preconditions != nullptr;
}

Result<bool> OptimizerInstance::preconditions(const dscore_model_param& param) const {
  if (!has_precondition()) return false;
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  auto answer = call_plugin_value<int32_t>(*host_, info_.display(), "preconditions",
                                           [&] { return vt->preconditions(handle_, &param); });
  if (!answer.ok()) return answer.status();
  return *answer != 0;
}

Status OptimizerInstance::precondition(const dscore_optimizer_precondition_args& args) {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  return call_plugin(*host_, info_.display(), "precondition",
                     [&] { return vt->precondition(handle_, &args); });
}

bool OptimizerInstance::has_extra_state() const {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_optimizer_vtable, save_extra_state) &&
         vt->save_extra_state != nullptr;
}

Result<std::string> OptimizerInstance::save_extra_state() const {
  std::string bytes;
  if (!has_extra_state()) return bytes;
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "save_extra_state", [&] {
    return vt->save_extra_state(handle_, detail::append_to_string, &bytes);
  }));
  return bytes;
}

Status OptimizerInstance::load_extra_state(std::string_view bytes) {
  const auto* vt = vtable_of<dscore_optimizer_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_optimizer_vtable, load_extra_state) ||
      vt->load_extra_state == nullptr)
    return bytes.empty() ? Status::Ok() : missing_load_extra(info_);
  return call_plugin(*host_, info_.display(), "load_extra_state",
                     [&] { return vt->load_extra_state(handle_, bytes.data(), bytes.size()); });
}

// --------------------------------------------------------------- scheduler

Result<std::unique_ptr<SchedulerInstance>> SchedulerInstance::create(
    const PluginInfo& info, const ValidatedParams& params, const InstanceContext& context,
    const std::vector<double>& base_lrs, int64_t total_steps) {
  DSCORE_RETURN_IF_ERROR(detail::prepare_create(info, DSCORE_KIND_SCHEDULER));
  if (base_lrs.empty())
    return Status(
        DSCORE_INVALID_ARGUMENT,
        info.display() + " needs at least one optimizer parameter group (base_lrs is empty)");
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info);
  std::shared_ptr<HostContext> host = detail::host_of(context);
  dscore_create_args args = detail::make_create_args(params, context, *host);
  dscore_scheduler_context sc{};
  sc.struct_size = sizeof sc;
  sc.group_count = base_lrs.size();
  sc.base_lrs = base_lrs.data();
  sc.total_steps = total_steps;
  dscore_scheduler* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host, info.display(), "create",
                                     [&] { return vt->create(&args, &sc, &handle); }));
  if (handle == nullptr) return detail::null_handle_error(info);
  return std::unique_ptr<SchedulerInstance>(new SchedulerInstance(info, handle, host));
}

SchedulerInstance::~SchedulerInstance() {
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info_);
  call_plugin_void(*host_, info_.display(), "destroy", [&] { vt->destroy(handle_); });
}

int64_t SchedulerInstance::first_iteration() const {
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_scheduler_vtable, first_iteration) ||
      vt->first_iteration == nullptr)
    return -1;
  Result<int64_t> t = call_plugin_value<int64_t>(*host_, info_.display(), "first_iteration",
                                                 [&] { return vt->first_iteration(handle_); });
  if (!t.ok()) {
    log_call_failure(t.status());
    return -1;
  }
  return *t;
}

Result<dscore_schedule_point> SchedulerInstance::point_at(int64_t t, size_t group) const {
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info_);
  dscore_schedule_point point{};
  point.struct_size = sizeof point;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "point_at",
                                     [&] { return vt->point_at(handle_, t, group, &point); }));
  const std::string at = info_.display() + " point_at(t=" + std::to_string(t) +
                         ", group=" + std::to_string(group) + ")";
  if ((point.set_mask & DSCORE_HPARAM_LR) == 0)
    return Status(DSCORE_INTERNAL, at + " did not set DSCORE_HPARAM_LR in set_mask");
  auto finite = [&](uint32_t bit, double v, const char* name) -> Status {
    if ((point.set_mask & bit) && !std::isfinite(v))
      return Status(DSCORE_INTERNAL, at + " returned a non-finite " + std::string(name));
    return Status::Ok();
  };
  DSCORE_RETURN_IF_ERROR(finite(DSCORE_HPARAM_LR, point.lr, "lr"));
  DSCORE_RETURN_IF_ERROR(finite(DSCORE_HPARAM_BETA1, point.beta1, "beta1"));
  DSCORE_RETURN_IF_ERROR(finite(DSCORE_HPARAM_BETA2, point.beta2, "beta2"));
  return point;
}

bool SchedulerInstance::has_extra_state() const {
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_scheduler_vtable, save_extra_state) &&
         vt->save_extra_state != nullptr;
}

Result<std::string> SchedulerInstance::save_extra_state() const {
  std::string bytes;
  if (!has_extra_state()) return bytes;
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info_);
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "save_extra_state", [&] {
    return vt->save_extra_state(handle_, detail::append_to_string, &bytes);
  }));
  return bytes;
}

Status SchedulerInstance::load_extra_state(std::string_view bytes) {
  const auto* vt = vtable_of<dscore_scheduler_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_scheduler_vtable, load_extra_state) ||
      vt->load_extra_state == nullptr)
    return bytes.empty() ? Status::Ok() : missing_load_extra(info_);
  return call_plugin(*host_, info_.display(), "load_extra_state",
                     [&] { return vt->load_extra_state(handle_, bytes.data(), bytes.size()); });
}

// ----------------------------------------------------------------- monitor

Result<std::unique_ptr<MonitorInstance>> MonitorInstance::create(const PluginInfo& info,
                                                                 const ValidatedParams& params,
                                                                 const InstanceContext& context) {
  DSCORE_RETURN_IF_ERROR(detail::prepare_create(info, DSCORE_KIND_MONITOR));
  const auto* vt = vtable_of<dscore_monitor_vtable>(info);
  std::shared_ptr<HostContext> host = detail::host_of(context);
  dscore_create_args args = detail::make_create_args(params, context, *host);
  dscore_monitor* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(
      call_plugin(*host, info.display(), "create", [&] { return vt->create(&args, &handle); }));
  if (handle == nullptr) return detail::null_handle_error(info);
  return std::unique_ptr<MonitorInstance>(new MonitorInstance(info, handle, host));
}

MonitorInstance::~MonitorInstance() {
  const auto* vt = vtable_of<dscore_monitor_vtable>(info_);
  call_plugin_void(*host_, info_.display(), "destroy", [&] { vt->destroy(handle_); });
}

Status MonitorInstance::write_scalars(const std::vector<dscore_scalar_event>& events) {
  std::vector<dscore_scalar_event> copies(events);
  std::vector<const dscore_scalar_event*> pointers;
  pointers.reserve(copies.size());
  for (dscore_scalar_event& e : copies) {
    e.struct_size = sizeof(dscore_scalar_event);
    pointers.push_back(&e);
  }
  const auto* vt = vtable_of<dscore_monitor_vtable>(info_);
  return call_plugin(*host_, info_.display(), "write_scalars",
                     [&] { return vt->write_scalars(handle_, pointers.data(), pointers.size()); });
}

Status MonitorInstance::flush() {
  const auto* vt = vtable_of<dscore_monitor_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_monitor_vtable, flush) || vt->flush == nullptr)
    return Status::Ok();
  return call_plugin(*host_, info_.display(), "flush", [&] { return vt->flush(handle_); });
}

Status MonitorInstance::write_config(const std::string& json) {
  const auto* vt = vtable_of<dscore_monitor_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_monitor_vtable, write_config) || vt->write_config == nullptr)
    return Status::Ok();
  return call_plugin(*host_, info_.display(), "write_config",
                     [&] { return vt->write_config(handle_, json.c_str()); });
}

}  // namespace dscore::plugin_host
