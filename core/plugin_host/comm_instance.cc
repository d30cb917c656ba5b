// Comm-backend and offload instances (comm_instance.h): creation, the
// guarded calls, and the few checks the host can make cheaply (alignment is
// a power of two, wait() does not report more completions than asked for).
#include "core/plugin_host/comm_instance.h"

#include "core/plugin_host/call.h"
#include "core/plugin_host/instance_common.h"

namespace dscore::plugin_host {

using detail::vtable_of;

// -------------------------------------------------------------------- comm

Result<std::unique_ptr<CommInstance>> CommInstance::create(const PluginInfo& info,
                                                           const ValidatedParams& params,
                                                           const InstanceContext& context) {
  DSCORE_RETURN_IF_ERROR(detail::prepare_create(info, DSCORE_KIND_COMM));
  const auto* vt = vtable_of<dscore_comm_vtable>(info);
  std::shared_ptr<HostContext> host = detail::host_of(context);
  dscore_create_args args = detail::make_create_args(params, context, *host);
  dscore_comm* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(
      call_plugin(*host, info.display(), "create", [&] { return vt->create(&args, &handle); }));
  if (handle == nullptr) return detail::null_handle_error(info);
  return std::unique_ptr<CommInstance>(new CommInstance(info, handle, host));
}

CommInstance::~CommInstance() {
  call_plugin_void(*host_, info_.display(), "destroy", [&] { vtable()->destroy(handle_); });
}

Result<std::unique_ptr<CommInstance>> CommInstance::split(int32_t color, int32_t key) {
  const dscore_comm_vtable* vt = vtable();
  if (!DSCORE_HAS_FIELD(vt, dscore_comm_vtable, split) || vt->split == nullptr)
    return Status(DSCORE_UNIMPLEMENTED,
                  info_.display() + " cannot split a communicator into groups (split is NULL)");
  dscore_comm* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "split",
                                     [&] { return vt->split(handle_, color, key, &handle); }));
  if (color == DSCORE_COMM_SPLIT_NONE) {
    if (handle != nullptr)
      return Status(DSCORE_INTERNAL, info_.display() +
                                         " split returned a communicator for a rank "
                                         "that passed DSCORE_COMM_SPLIT_NONE");
    return std::unique_ptr<CommInstance>();
  }
  if (handle == nullptr) return detail::null_handle_error(info_);
  return std::unique_ptr<CommInstance>(new CommInstance(info_, handle, host_));
}

const dscore_comm_vtable* CommInstance::vtable() const {
  return vtable_of<dscore_comm_vtable>(info_);
}

Status CommInstance::allreduce(const dscore_tensor& send, dscore_tensor& recv, dscore_reduce_op op,
                               void* stream) {
  return call_plugin(*host_, info_.display(), "allreduce",
                     [&] { return vtable()->allreduce(handle_, &send, &recv, op, stream); });
}

Status CommInstance::reduce_scatter(const dscore_tensor& send, dscore_tensor& recv,
                                    dscore_reduce_op op, void* stream) {
  return call_plugin(*host_, info_.display(), "reduce_scatter",
                     [&] { return vtable()->reduce_scatter(handle_, &send, &recv, op, stream); });
}

Status CommInstance::reduce(const dscore_tensor& send, dscore_tensor* recv, dscore_reduce_op op,
                            int32_t root, void* stream) {
  return call_plugin(*host_, info_.display(), "reduce",
                     [&] { return vtable()->reduce(handle_, &send, recv, op, root, stream); });
}

Result<dscore_comm_counters> CommInstance::counters() const {
  const dscore_comm_vtable* vt = vtable();
  if (!DSCORE_HAS_FIELD(vt, dscore_comm_vtable, counters) || vt->counters == nullptr)
    return Status(DSCORE_UNIMPLEMENTED, info_.display() + " keeps no traffic counters");
  dscore_comm_counters out{};
  out.struct_size = sizeof out;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "counters",
                                     [&] { return vt->counters(handle_, &out); }));
  return out;
}

Status CommInstance::allgather(const dscore_tensor& send, dscore_tensor& recv, void* stream) {
  return call_plugin(*host_, info_.display(), "allgather",
                     [&] { return vtable()->allgather(handle_, &send, &recv, stream); });
}

Status CommInstance::broadcast(dscore_tensor& tensor, int32_t root, void* stream) {
  return call_plugin(*host_, info_.display(), "broadcast",
                     [&] { return vtable()->broadcast(handle_, &tensor, root, stream); });
}

Status CommInstance::send(const dscore_tensor& tensor, int32_t peer, void* stream) {
  return call_plugin(*host_, info_.display(), "send",
                     [&] { return vtable()->send(handle_, &tensor, peer, stream); });
}

Status CommInstance::recv(dscore_tensor& tensor, int32_t peer, void* stream) {
  return call_plugin(*host_, info_.display(), "recv",
                     [&] { return vtable()->recv(handle_, &tensor, peer, stream); });
}

Status CommInstance::barrier() {
  return call_plugin(*host_, info_.display(), "barrier",
                     [&] { return vtable()->barrier(handle_); });
}

Status CommInstance::all_to_all(const dscore_tensor& send, dscore_tensor& recv, void* stream) {
  const dscore_comm_vtable* vt = vtable();
  if (!DSCORE_HAS_FIELD(vt, dscore_comm_vtable, all_to_all) || vt->all_to_all == nullptr)
    return Status(DSCORE_UNIMPLEMENTED, info_.display() + " has no all_to_all");
  return call_plugin(*host_, info_.display(), "all_to_all",
                     [&] { return vt->all_to_all(handle_, &send, &recv, stream); });
}

Status CommInstance::all_to_all_v(const dscore_tensor& send, dscore_tensor& recv,
                                  const dscore_all_to_all_layout& layout, void* stream) {
  const dscore_comm_vtable* vt = vtable();
  if (!DSCORE_HAS_FIELD(vt, dscore_comm_vtable, all_to_all_v) || vt->all_to_all_v == nullptr)
    return Status(DSCORE_UNIMPLEMENTED, info_.display() + " has no all_to_all_v");
  return call_plugin(*host_, info_.display(), "all_to_all_v",
                     [&] { return vt->all_to_all_v(handle_, &send, &recv, &layout, stream); });
}

bool CommInstance::has_groups() const {
  const dscore_comm_vtable* vt = vtable();
  return DSCORE_HAS_FIELD(vt, dscore_comm_vtable, group_end) && vt->group_start != nullptr &&
         vt->group_end != nullptr;
}

Status CommInstance::group_start() {
  if (!has_groups())
    return Status(DSCORE_UNIMPLEMENTED, info_.display() + " has no group_start/group_end");
  return call_plugin(*host_, info_.display(), "group_start",
                     [&] { return vtable()->group_start(handle_); });
}

Status CommInstance::group_end(void* stream) {
  if (!has_groups())
    return Status(DSCORE_UNIMPLEMENTED, info_.display() + " has no group_start/group_end");
  return call_plugin(*host_, info_.display(), "group_end",
                     [&] { return vtable()->group_end(handle_, stream); });
}

void CommInstance::abort(const std::string& reason) {
  const dscore_comm_vtable* vt = vtable();
  if (!DSCORE_HAS_FIELD(vt, dscore_comm_vtable, abort) || vt->abort == nullptr) return;
  call_plugin_void(*host_, info_.display(), "abort", [&] { vt->abort(handle_, reason.c_str()); });
}

// ----------------------------------------------------------------- offload

Result<std::unique_ptr<OffloadInstance>> OffloadInstance::create(const PluginInfo& info,
                                                                 const ValidatedParams& params,
                                                                 const InstanceContext& context) {
  DSCORE_RETURN_IF_ERROR(detail::prepare_create(info, DSCORE_KIND_OFFLOAD));
  const auto* vt = vtable_of<dscore_offload_vtable>(info);
  const std::string who = info.display();
  std::shared_ptr<HostContext> host = detail::host_of(context);
  dscore_create_args args = detail::make_create_args(params, context, *host);
  dscore_offload* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(
      call_plugin(*host, who, "create", [&] { return vt->create(&args, &handle); }));
  if (handle == nullptr) return detail::null_handle_error(info);
  std::unique_ptr<OffloadInstance> instance(new OffloadInstance(info, handle, host));
  Result<size_t> alignment =
      call_plugin_value<size_t>(*host, who, "alignment", [&] { return vt->alignment(handle); });
  if (!alignment.ok()) return alignment.status();
  if (*alignment == 0 || (*alignment & (*alignment - 1)) != 0)
    return Status(DSCORE_INTERNAL, who + " alignment() returned " + std::to_string(*alignment) +
                                       "; it must be a power of two");
  instance->alignment_ = *alignment;
  if (DSCORE_HAS_FIELD(vt, dscore_offload_vtable, backend) && vt->backend != nullptr) {
    Result<const char*> backend =
        call_plugin_value<const char*>(*host, who, "backend", [&] { return vt->backend(handle); });
    if (!backend.ok()) return backend.status();
    if (*backend != nullptr && **backend != '\0') instance->backend_ = *backend;
  }
  return instance;
}

OffloadInstance::~OffloadInstance() {
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  call_plugin_void(*host_, info_.display(), "destroy", [&] { vt->destroy(handle_); });
}

Result<int64_t> OffloadInstance::open_file(const std::string& path, uint32_t flags) {
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  int64_t file = -1;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "open_file", [&] {
    return vt->open_file(handle_, path.c_str(), flags, &file);
  }));
  return file;
}

Status OffloadInstance::close_file(int64_t file) {
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  return call_plugin(*host_, info_.display(), "close_file",
                     [&] { return vt->close_file(handle_, file); });
}

Status OffloadInstance::sync_file(int64_t file) {
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  return call_plugin(*host_, info_.display(), "sync_file",
                     [&] { return vt->sync_file(handle_, file); });
}

Status OffloadInstance::submit(const std::vector<dscore_io_request>& requests) {
  std::vector<dscore_io_request> copies(requests);
  std::vector<const dscore_io_request*> pointers;
  for (dscore_io_request& r : copies) {
    r.struct_size = sizeof(dscore_io_request);
    pointers.push_back(&r);
  }
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  return call_plugin(*host_, info_.display(), "submit",
                     [&] { return vt->submit(handle_, pointers.data(), pointers.size()); });
}

Status OffloadInstance::wait(size_t min_count, int64_t timeout_ms, size_t capacity,
                             std::vector<dscore_io_completion>* out) {
  out->assign(capacity, dscore_io_completion{});
  std::vector<dscore_io_completion*> pointers;
  for (dscore_io_completion& c : *out) {
    c.struct_size = sizeof(dscore_io_completion);
    pointers.push_back(&c);
  }
  size_t count = 0;
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  Status st = call_plugin(*host_, info_.display(), "wait", [&] {
    return vt->wait(handle_, min_count, timeout_ms, pointers.data(), capacity, &count);
  });
  if (count > capacity) {
    out->clear();
    return Status(DSCORE_INTERNAL, info_.display() + " wait reported " + std::to_string(count) +
                                       " completions for room of " + std::to_string(capacity));
  }
  out->resize(count);
  return st;
}

Status OffloadInstance::register_buffers(const std::vector<void*>& buffers,
                                         const std::vector<size_t>& sizes) {
  DSCORE_CHECK(buffers.size() == sizes.size(), "one size per buffer");
  const auto* vt = vtable_of<dscore_offload_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_offload_vtable, register_buffers) ||
      vt->register_buffers == nullptr)
    return Status::Ok();
  Status st = call_plugin(*host_, info_.display(), "register_buffers", [&] {
    return vt->register_buffers(handle_, buffers.data(), sizes.data(), buffers.size());
  });
  return st.code() == DSCORE_UNIMPLEMENTED ? Status::Ok() : st;
}

}  // namespace dscore::plugin_host
