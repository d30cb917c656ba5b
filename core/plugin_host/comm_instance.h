// Typed, owning handles to comm-backend and offload (swapper) plugin
// instances, in the style of instances.h: each holds its library, calls the
// plugin only through call.h and destroys the instance exactly once. These
// are thin: counting bytes, timeouts and the host's communicator table are
// the comm layer's job, built on top of CommInstance.
#pragma once

#include <dscore/comm.h>
#include <dscore/offload.h>

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/plugin_host/instances.h"

namespace dscore::plugin_host {

class CommInstance {
 public:
  // Collective: every rank calls it (see comm.h).
  static Result<std::unique_ptr<CommInstance>> create(const PluginInfo& info,
                                                      const ValidatedParams& params,
                                                      const InstanceContext& context);
  ~CommInstance();
  const PluginInfo& info() const { return info_; }
  const dscore_comm_vtable* vtable() const;
  dscore_comm* handle() const { return handle_; }

  Status allreduce(const dscore_tensor& send, dscore_tensor& recv, dscore_reduce_op op,
                   void* stream);
  Status reduce_scatter(const dscore_tensor& send, dscore_tensor& recv, dscore_reduce_op op,
                        void* stream);
  Status allgather(const dscore_tensor& send, dscore_tensor& recv, void* stream);
  Status broadcast(dscore_tensor& tensor, int32_t root, void* stream);
  Status send(const dscore_tensor& tensor, int32_t peer, void* stream);
  Status recv(dscore_tensor& tensor, int32_t peer, void* stream);
  Status barrier();
  // UNIMPLEMENTED when the backend has no all_to_all.
  Status all_to_all(const dscore_tensor& send, dscore_tensor& recv, void* stream);
  // Variable counts (comm.h all_to_all_v); UNIMPLEMENTED when the backend has none.
  Status all_to_all_v(const dscore_tensor& send, dscore_tensor& recv,
                      const dscore_all_to_all_layout& layout, void* stream);
  Status reduce(const dscore_tensor& send, dscore_tensor* recv, dscore_reduce_op op, int32_t root,
                void* stream);
  // Grouped calls (comm.h group_start/group_end, ABI 1.2): whether the
  // backend has both entries; the host issues a group's calls one by one
  // when it has not. Call these only when has_groups().
  bool has_groups() const;
  Status group_start();
  Status group_end(void* stream);
  // No-op when the backend has no abort.
  void abort(const std::string& reason);
  // UNIMPLEMENTED when the backend keeps no counters.
  Result<dscore_comm_counters> counters() const;
  // Collective over this communicator (comm.h split): the new group's
  // instance, or nullptr for DSCORE_COMM_SPLIT_NONE. UNIMPLEMENTED when the
  // backend cannot split. The new instance shares this one's host context.
  Result<std::unique_ptr<CommInstance>> split(int32_t color, int32_t key);
  HostContext& host() const { return *host_; }

 private:
  CommInstance(PluginInfo info, dscore_comm* handle, std::shared_ptr<HostContext> host)
      : info_(std::move(info)), handle_(handle), host_(std::move(host)) {}
  PluginInfo info_;
  dscore_comm* handle_;
  std::shared_ptr<HostContext> host_;
};

class OffloadInstance {
 public:
  static Result<std::unique_ptr<OffloadInstance>> create(const PluginInfo& info,
                                                         const ValidatedParams& params,
                                                         const InstanceContext& context);
  ~OffloadInstance();
  const PluginInfo& info() const { return info_; }

  size_t alignment() const { return alignment_; }  // read once at creation; a power of two
  // The plugin's I/O mechanism ("io_uring", "threads"), read once at
  // creation; "unknown" when the plugin does not say.
  const std::string& backend() const { return backend_; }
  Result<int64_t> open_file(const std::string& path, uint32_t flags);
  Status close_file(int64_t file);
  Status sync_file(int64_t file);
  Status submit(const std::vector<dscore_io_request>& requests);
  // Reaps at most `capacity` completions into *out (replacing its
  // contents). os_error is 0 in completions from a plugin built before the
  // field existed. DEADLINE_EXCEEDED when fewer than min_count completed within
  // timeout_ms; *out still holds those that did.
  Status wait(size_t min_count, int64_t timeout_ms, size_t capacity,
              std::vector<dscore_io_completion>* out);
  // OK when the plugin does not register buffers (NULL or UNIMPLEMENTED).
  Status register_buffers(const std::vector<void*>& buffers, const std::vector<size_t>& sizes);

 private:
  OffloadInstance(PluginInfo info, dscore_offload* handle, std::shared_ptr<HostContext> host)
      : info_(std::move(info)), handle_(handle), host_(std::move(host)) {}
  PluginInfo info_;
  dscore_offload* handle_;
  std::shared_ptr<HostContext> host_;
  size_t alignment_ = 1;
  std::string backend_ = "unknown";
};

}  // namespace dscore::plugin_host
