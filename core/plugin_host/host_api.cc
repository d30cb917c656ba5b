// The dscore_host_api functions. Each is a plain function called from plugin
// code, so none may let an exception out: everything that can allocate sits
// inside a try block and degrades (a dropped log line, RESOURCE_EXHAUSTED).
// State lives in the HostContext the caller passes (host_context.h).
#include "core/plugin_host/host_api.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/base/engine_scope.h"
#include "core/base/logging.h"

#ifndef DSCORE_VERSION
#define DSCORE_VERSION "unknown"
#endif

namespace dscore::plugin_host {
namespace {

dscore_status record_error(dscore_host_context* ctx, dscore_status code,
                           const char* message) noexcept {
  if (HostContext* c = HostContext::from(ctx)) return c->record_error(code, message);
  return code;  // no context: nobody reads it (see plugin.h)
}

void host_log(dscore_host_context* ctx, dscore_log_level level, const char* plugin,
              const char* message) noexcept {
  try {
    // The line shows the rank of the engine the plugin serves, whatever
    // thread it logs from.
    HostContext* c = HostContext::from(ctx);
    std::shared_ptr<const EngineIdentity> engine = EngineScope::current();
    if (c != nullptr) engine = c->identity();
    EngineScope scope(std::move(engine));
    LogLevel l = LogLevel::kInfo;
    switch (level) {
      case DSCORE_LOG_DEBUG:
        l = LogLevel::kDebug;
        break;
      case DSCORE_LOG_WARNING:
        l = LogLevel::kWarning;
        break;
      case DSCORE_LOG_ERROR:
        l = LogLevel::kError;
        break;
      default:
        break;
    }
    std::string line = plugin != nullptr ? plugin : "plugin";
    line += ": ";
    line += message != nullptr ? message : "";
    dscore::log(l, line);
  } catch (...) {
  }
}

dscore_status host_set_error(dscore_host_context* ctx, dscore_status code,
                             const char* message) noexcept {
  return record_error(ctx, code, message);
}

void* host_alloc(dscore_host_context* ctx, size_t bytes, size_t alignment, dscore_memory_kind kind,
                 const char* tag) noexcept {
  try {
    HostContext* c = HostContext::from(ctx);
    if (kind == DSCORE_MEMORY_DEVICE) {
      Result<void*> p =
          c != nullptr
              ? c->allocate_device(bytes, alignment, tag != nullptr ? tag : "plugin")
              : Result<void*>(unimplemented("host->alloc: device memory needs a host context"));
      if (!p.ok()) {
        record_error(ctx, p.status().code(), p.status().message().c_str());
        return nullptr;
      }
      return *p;
    }
    MemoryLedger& ledger = c != nullptr ? c->memory() : process_memory();
    void* p =
        ledger.allocate(bytes, alignment, kind, MemoryUse::kOther, tag != nullptr ? tag : "plugin");
    if (p == nullptr) {
      std::string what = kind == DSCORE_MEMORY_PINNED ? "pinned" : "host";
      record_error(ctx, DSCORE_RESOURCE_EXHAUSTED,
                   ("host->alloc could not allocate " + std::to_string(bytes) + " bytes of " +
                    what + " memory (alignment " + std::to_string(alignment) + ")")
                       .c_str());
    }
    return p;
  } catch (...) {
    record_error(ctx, DSCORE_RESOURCE_EXHAUSTED, "host->alloc: out of memory");
    return nullptr;
  }
}

void host_free(dscore_host_context* ctx, void* ptr, dscore_memory_kind kind) noexcept {
  HostContext* c = HostContext::from(ctx);
  if (kind == DSCORE_MEMORY_DEVICE && c != nullptr && c->free_device(ptr)) return;
  (c != nullptr ? c->memory() : process_memory()).release(ptr);
}

const dscore_communicator* host_communicator(dscore_host_context* ctx,
                                             dscore_comm_group group) noexcept {
  HostContext* c = HostContext::from(ctx);
  return c != nullptr ? c->communicator(group) : nullptr;
}

dscore_status host_kv_set(dscore_host_context* ctx, const char* key, const void* value,
                          size_t size) noexcept {
  HostContext* c = HostContext::from(ctx);
  if (c == nullptr) return DSCORE_UNAVAILABLE;
  if (key == nullptr || (value == nullptr && size > 0))
    return record_error(ctx, DSCORE_INVALID_ARGUMENT, "kv_set: key and value must not be NULL");
  try {
    Status st = c->kv().set(key, std::string(static_cast<const char*>(value), size));
    return st.ok() ? DSCORE_OK : record_error(ctx, st.code(), st.message().c_str());
  } catch (...) {
    return record_error(ctx, DSCORE_RESOURCE_EXHAUSTED, "kv_set: out of memory");
  }
}

dscore_status host_kv_get(dscore_host_context* ctx, const char* key, void* buffer, size_t capacity,
                          size_t* size, int64_t timeout_ms) noexcept {
  HostContext* c = HostContext::from(ctx);
  if (c == nullptr) return DSCORE_UNAVAILABLE;
  if (key == nullptr || size == nullptr || (buffer == nullptr && capacity > 0))
    return record_error(ctx, DSCORE_INVALID_ARGUMENT,
                        "kv_get: key, size and buffer must not be NULL");
  try {
    Result<std::string> value = c->kv().get(key, timeout_ms);
    if (!value.ok())
      return record_error(ctx, value.status().code(),
                          ("kv_get: " + value.status().message()).c_str());
    *size = value->size();
    if (capacity > 0) std::memcpy(buffer, value->data(), std::min(capacity, value->size()));
    return DSCORE_OK;
  } catch (...) {
    return record_error(ctx, DSCORE_RESOURCE_EXHAUSTED, "kv_get: out of memory");
  }
}

void host_range_push(dscore_host_context* ctx, const char* name) noexcept {
  try {
    if (HostContext* c = HostContext::from(ctx)) c->push_range(name);
  } catch (...) {
  }
}

void host_range_pop(dscore_host_context* ctx) noexcept {
  if (HostContext* c = HostContext::from(ctx)) c->pop_range();
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

}  // namespace dscore::plugin_host
