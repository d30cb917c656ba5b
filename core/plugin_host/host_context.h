// HostContext: what dscore_host_context points to. One per engine (plus one
// per loaded library for its init/shutdown): the communicator groups its
// plugins reach through host->communicator, the ledger of what they allocate
// through host->alloc, the error slots host->set_error fills (one per
// thread, read by call.h after each plugin call), the key-value store, and
// the profiling-range stacks. Nothing here is process-global, so two engines
// in one process keep apart.
#pragma once

#include <dscore/comm.h>
#include <dscore/plugin.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/engine_scope.h"
#include "core/base/memory.h"
#include "core/base/status.h"
#include "core/device/device.h"

namespace dscore::plugin_host {

// The store behind kv_set/kv_get. Implementations are thread-safe.
class KvBackend {
 public:
  virtual ~KvBackend() = default;
  virtual Status set(const std::string& key, std::string value) = 0;
  // Waits up to timeout_ms (< 0: no limit) for the key. DEADLINE_EXCEEDED
  // with a message naming the key when it does not appear in time.
  virtual Result<std::string> get(const std::string& key, int64_t timeout_ms) = 0;
};
// A store shared by whoever holds it: the ranks of one process (threads).
std::shared_ptr<KvBackend> make_in_process_kv();

class HostContext {
 public:
  // `kv` is the job's store; nullptr gives this context a store of its own.
  explicit HostContext(std::shared_ptr<KvBackend> kv = nullptr);
  ~HostContext();
  HostContext(const HostContext&) = delete;
  HostContext& operator=(const HostContext&) = delete;

  dscore_host_context* handle() { return reinterpret_cast<dscore_host_context*>(this); }
  // nullptr for a NULL handle.
  static HostContext* from(dscore_host_context* handle) {
    return reinterpret_cast<HostContext*>(handle);
  }

  // The calling thread's error slot.
  dscore_status record_error(dscore_status code, const char* message) noexcept;
  std::optional<std::pair<dscore_status, std::string>> take_error();
  void clear_error();

  // What host->communicator(ctx, group) returns; NULL removes it. Borrowed:
  // the caller keeps it alive while installed.
  void set_communicator(dscore_comm_group group, const dscore_communicator* communicator);
  const dscore_communicator* communicator(dscore_comm_group group) const;

  // The device the engine computes on: host->alloc's DSCORE_MEMORY_DEVICE
  // comes from it when it is a CUDA device (counted in the process ledger,
  // where the device records what it allocates). Borrowed; nullptr: none.
  void set_device(device::Device* device) { device_ = device; }
  // Device memory for a plugin; nullptr and the reason when there is none.
  Result<void*> allocate_device(size_t bytes, size_t alignment, std::string_view tag);
  // False when `ptr` is not device memory this context handed out.
  bool free_device(void* ptr);

  MemoryLedger& memory() { return memory_; }
  const MemoryLedger& memory() const { return memory_; }
  // Who the engine is to the process-wide services (engine_scope.h): its
  // log rank, and the ledger its own buffers count in (engine_memory()).
  // The engine enters it in its calls.
  const std::shared_ptr<EngineIdentity>& identity() const { return identity_; }
  void set_log_rank(int rank, int world_size);  // no prefix for a world of one
  const MemoryLedger& engine_memory() const { return *identity_->ledger; }
  KvBackend& kv() { return *kv_; }
  const std::shared_ptr<KvBackend>& kv_store() const { return kv_; }

  void push_range(const char* name);
  void pop_range();
  // Depth of the calling thread's range stack.
  size_t range_depth() const;

 private:
  struct LastError {
    bool set = false;
    dscore_status code = DSCORE_OK;
    std::string message;
  };
  // DSCORE_GROUP_WORLD, DSCORE_GROUP_DATA_PARALLEL, DSCORE_GROUP_TENSOR_PARALLEL
  static constexpr size_t kGroups = 5;

  std::shared_ptr<KvBackend> kv_;
  MemoryLedger memory_;  // what its plugins allocate through host->alloc
  std::shared_ptr<EngineIdentity> identity_;
  device::Device* device_ = nullptr;
  std::mutex device_mutex_;
  std::unordered_map<void*, device::Buffer> device_buffers_;
  std::array<std::atomic<const dscore_communicator*>, kGroups> communicators_{};
  mutable std::mutex mutex_;  // guards the per-thread maps
  std::unordered_map<std::thread::id, LastError> errors_;
  std::unordered_map<std::thread::id, std::vector<std::string>> ranges_;
};

}  // namespace dscore::plugin_host
