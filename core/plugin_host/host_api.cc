// The dscore_host_api functions. Each is a plain function called from plugin
// code, so none may let an exception out: everything that can allocate sits
// inside a try block and degrades (a dropped log line, RESOURCE_EXHAUSTED).
#include "core/plugin_host/host_api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/base/logging.h"
#include "core/base/memory.h"

#ifndef DSCORE_VERSION
#define DSCORE_VERSION "unknown"
#endif

namespace dscore::plugin_host {
namespace {

struct LastError {
  bool set = false;
  dscore_status code = DSCORE_OK;
  std::string message;
};
thread_local LastError t_last_error;
thread_local std::vector<std::string> t_ranges;

std::atomic<const dscore_communicator*> g_communicator{nullptr};

class InProcessKv : public KvBackend {
 public:
  Status set(const std::string& key, std::string value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = std::move(value);
    }
    changed_.notify_all();
    return Status::Ok();
  }

  Result<std::string> get(const std::string& key, int64_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto present = [&] { return values_.count(key) != 0; };
    if (timeout_ms < 0) {
      changed_.wait(lock, present);
    } else if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), present)) {
      return Status(DSCORE_DEADLINE_EXCEEDED, "key '" + key + "' was not published within " +
                                                  std::to_string(timeout_ms) + " ms");
    }
    return values_.at(key);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

std::mutex g_kv_mutex;
std::shared_ptr<KvBackend>& kv_slot() {
  static auto* slot = new std::shared_ptr<KvBackend>(make_in_process_kv());  // never destroyed
  return *slot;
}
std::shared_ptr<KvBackend> kv_backend() {
  std::lock_guard<std::mutex> lock(g_kv_mutex);
  return kv_slot();
}

dscore_status record_error(dscore_status code, const char* message) noexcept {
  try {
    t_last_error.set = true;
    t_last_error.code = code;
    t_last_error.message = message != nullptr ? message : "";
  } catch (...) {
    t_last_error.message.clear();  // out of memory: keep the code at least
  }
  return code;
}

// ---- the table's functions ----

void host_log(dscore_log_level level, const char* plugin, const char* message) noexcept {
  try {
    LogLevel l = LogLevel::kInfo;
    switch (level) {
      case DSCORE_LOG_DEBUG: l = LogLevel::kDebug; break;
      case DSCORE_LOG_WARNING: l = LogLevel::kWarning; break;
      case DSCORE_LOG_ERROR: l = LogLevel::kError; break;
      default: break;
    }
    std::string line = plugin != nullptr ? plugin : "plugin";
    line += ": ";
    line += message != nullptr ? message : "";
    dscore::log(l, line);
  } catch (...) {
  }
}

dscore_status host_set_error(dscore_status code, const char* message) noexcept {
  return record_error(code, message);
}

void* host_alloc(size_t bytes, size_t alignment, dscore_memory_kind kind, const char* tag) noexcept {
  try {
    void* p = counted_alloc(bytes, alignment, kind, tag != nullptr ? tag : "plugin");
    if (p == nullptr) {
      std::string what = kind == DSCORE_MEMORY_DEVICE ? "device" : kind == DSCORE_MEMORY_PINNED ? "pinned" : "host";
      record_error(DSCORE_RESOURCE_EXHAUSTED,
                   ("host->alloc could not allocate " + std::to_string(bytes) + " bytes of " + what +
                    " memory (alignment " + std::to_string(alignment) + ")")
                       .c_str());
    }
    return p;
  } catch (...) {
    record_error(DSCORE_RESOURCE_EXHAUSTED, "host->alloc: out of memory");
    return nullptr;
  }
}

void host_free(void* ptr, dscore_memory_kind kind) noexcept { counted_free(ptr, kind); }

const dscore_communicator* host_communicator() noexcept { return g_communicator.load(); }

dscore_status host_kv_set(const char* key, const void* value, size_t size) noexcept {
  if (key == nullptr || (value == nullptr && size > 0))
    return record_error(DSCORE_INVALID_ARGUMENT, "kv_set: key and value must not be NULL");
  try {
    Status st = kv_backend()->set(key, std::string(static_cast<const char*>(value), size));
    return st.ok() ? DSCORE_OK : record_error(st.code(), st.message().c_str());
  } catch (...) {
    return record_error(DSCORE_RESOURCE_EXHAUSTED, "kv_set: out of memory");
  }
}

dscore_status host_kv_get(const char* key, void* buffer, size_t capacity, size_t* size,
                          int64_t timeout_ms) noexcept {
  if (key == nullptr || size == nullptr || (buffer == nullptr && capacity > 0))
    return record_error(DSCORE_INVALID_ARGUMENT, "kv_get: key, size and buffer must not be NULL");
  try {
    Result<std::string> value = kv_backend()->get(key, timeout_ms);
    if (!value.ok())
      return record_error(value.status().code(), ("kv_get: " + value.status().message()).c_str());
    *size = value->size();
    if (capacity > 0) std::memcpy(buffer, value->data(), std::min(capacity, value->size()));
    return DSCORE_OK;
  } catch (...) {
    return record_error(DSCORE_RESOURCE_EXHAUSTED, "kv_get: out of memory");
  }
}

void host_range_push(const char* name) noexcept {
  try {
    t_ranges.emplace_back(name != nullptr ? name : "");
  } catch (...) {
  }
}

void host_range_pop() noexcept {
  // An unmatched pop is a plugin bug; ignoring it keeps other ranges intact.
  if (!t_ranges.empty()) t_ranges.pop_back();
}

uint64_t host_now_ns() noexcept {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

const dscore_host_api kHostApi = {
    sizeof(dscore_host_api),
    DSCORE_ABI_VERSION_MAJOR,
    DSCORE_ABI_VERSION_MINOR,
    DSCORE_VERSION,
    host_log,
    host_set_error,
    host_alloc,
    host_free,
    host_communicator,
    host_kv_set,
    host_kv_get,
    host_range_push,
    host_range_pop,
    host_now_ns,
};

}  // namespace

const dscore_host_api* host_api() { return &kHostApi; }

std::optional<std::pair<dscore_status, std::string>> take_last_error() {
  if (!t_last_error.set) return std::nullopt;
  std::pair<dscore_status, std::string> out{t_last_error.code, std::move(t_last_error.message)};
  clear_last_error();
  return out;
}

void clear_last_error() {
  t_last_error.set = false;
  t_last_error.code = DSCORE_OK;
  t_last_error.message.clear();
}

void set_communicator(const dscore_communicator* communicator) { g_communicator = communicator; }

std::unique_ptr<KvBackend> make_in_process_kv() { return std::make_unique<InProcessKv>(); }

void set_kv_backend(std::shared_ptr<KvBackend> backend) {
  std::lock_guard<std::mutex> lock(g_kv_mutex);
  kv_slot() = backend ? std::move(backend) : std::shared_ptr<KvBackend>(make_in_process_kv());
}

size_t range_depth() { return t_ranges.size(); }

}  // namespace dscore::plugin_host
