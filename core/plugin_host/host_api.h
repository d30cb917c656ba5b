// The host services table (dscore_host_api of sdk/include/dscore/plugin.h):
// one static instance handed to every library's init(). Logging goes to
// core/base/logging with the plugin's name, memory to the counted allocator,
// errors to a thread-local "last error" the call helper (call.h) reads, the
// communicator to whatever the engine installs, and the key-value store to an
// in-process map unless a job-wide backend is installed.
#pragma once

#include <dscore/comm.h>
#include <dscore/plugin.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/base/status.h"

namespace dscore::plugin_host {

// The table. Valid for the life of the process.
const dscore_host_api* host_api();

// The error a plugin recorded with set_error on this thread since the last
// clear, and clears it. Used by call.h after a non-OK return.
std::optional<std::pair<dscore_status, std::string>> take_last_error();
void clear_last_error();

// What host->communicator() returns (NULL until the engine installs the
// job's communicator; NULL again to remove it). Borrowed: the caller keeps
// it alive while installed.
void set_communicator(const dscore_communicator* communicator);

// The job-wide key-value store behind kv_set/kv_get. The default is an
// in-process store (one process = the whole job); a multi-process launcher
// installs one that reaches every rank. Implementations are thread-safe.
class KvBackend {
 public:
  virtual ~KvBackend() = default;
  virtual Status set(const std::string& key, std::string value) = 0;
  // Waits up to timeout_ms (< 0: no limit) for the key. DEADLINE_EXCEEDED
  // with a message naming the key when it does not appear in time.
  virtual Result<std::string> get(const std::string& key, int64_t timeout_ms) = 0;
};
std::unique_ptr<KvBackend> make_in_process_kv();
// nullptr restores the in-process store.
void set_kv_backend(std::shared_ptr<KvBackend> backend);

// Depth of this thread's profiling-range stack (range_push minus range_pop).
size_t range_depth();

}  // namespace dscore::plugin_host
