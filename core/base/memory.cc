// Counted memory: MemoryLedger records every live allocation by kind, use
// and tag; the free functions use the process ledger.
#include "core/base/memory.h"

#include "core/base/engine_scope.h"

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace dscore {
namespace {

struct Record {
  size_t bytes;
  dscore_memory_kind kind;
  MemoryUse use;
  std::string tag;
  bool external = false;  // recorded, not allocated, by the ledger: never freed by it
  // The process ledger's records also count in the ledger of the engine
  // whose thread made them (engine_scope.h), until freed.
  std::shared_ptr<MemoryLedger> engine;
};

// The engine ledger the calling thread's allocations count in, if any.
std::shared_ptr<MemoryLedger> engine_ledger() {
  const std::shared_ptr<const EngineIdentity>& engine = EngineScope::current();
  return engine ? engine->ledger : nullptr;
}

int kind_index(dscore_memory_kind kind) {
  return (kind >= DSCORE_MEMORY_HOST && kind <= DSCORE_MEMORY_DEVICE) ? kind : 0;
}

}  // namespace

const char* memory_use_name(MemoryUse use) {
  switch (use) {
    case MemoryUse::kParameters:
      return "parameters";
    case MemoryUse::kGradients:
      return "gradients";
    case MemoryUse::kMaster:
      return "master weights";
    case MemoryUse::kOptimizerState:
      return "optimizer state";
    case MemoryUse::kBuffers:
      return "buffers";
    case MemoryUse::kActivations:
      return "activations";
    case MemoryUse::kOther:
      return "other";
  }
  return "other";
}

struct MemoryLedger::State {
  bool attributes = false;  // the process ledger: records count in engine ledgers too
  mutable std::mutex mutex;
  std::unordered_map<void*, Record> records;
  MemoryUsage usage[3];
};

MemoryLedger::MemoryLedger() : state_(std::make_unique<State>()) {}
MemoryLedger::~MemoryLedger() = default;

void* MemoryLedger::allocate(size_t bytes, size_t alignment, dscore_memory_kind kind, MemoryUse use,
                             std::string_view tag) {
  if (kind == DSCORE_MEMORY_DEVICE) return nullptr;  // device memory comes from record_external
  // No machine has that much; refusing here also keeps sanitizer allocators,
  // which abort on such sizes, on the nullptr path.
  if (bytes > static_cast<size_t>(PTRDIFF_MAX)) return nullptr;
  if (alignment == 0) alignment = 64;
  if ((alignment & (alignment - 1)) != 0 || alignment < sizeof(void*)) return nullptr;
  void* ptr = nullptr;
  if (posix_memalign(&ptr, alignment, bytes == 0 ? alignment : bytes) != 0) return nullptr;
  if (kind == DSCORE_MEMORY_PINNED) (void)mlock(ptr, bytes);  // best effort without CUDA
  std::shared_ptr<MemoryLedger> engine = state_->attributes ? engine_ledger() : nullptr;
  if (engine) engine->record_external(ptr, bytes, kind, use, tag);
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->records[ptr] =
      Record{bytes, kind, use, std::string(tag.empty() ? "untagged" : tag), false, engine};
  MemoryUsage& u = state_->usage[kind_index(kind)];
  u.current_bytes += bytes;
  if (u.current_bytes > u.peak_bytes) u.peak_bytes = u.current_bytes;
  return ptr;
}

void MemoryLedger::release(void* ptr) {
  if (ptr == nullptr) return;
  size_t bytes = 0;
  dscore_memory_kind kind = DSCORE_MEMORY_HOST;
  std::shared_ptr<MemoryLedger> engine;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->records.find(ptr);
    // Not ours: never free what we did not allocate.
    if (it == state_->records.end() || it->second.external) return;
    bytes = it->second.bytes;
    kind = it->second.kind;
    engine = std::move(it->second.engine);
    state_->usage[kind_index(kind)].current_bytes -= bytes;
    state_->records.erase(it);
  }
  if (engine) engine->forget_external(ptr);
  if (kind == DSCORE_MEMORY_PINNED) (void)munlock(ptr, bytes);
  std::free(ptr);
}

void MemoryLedger::record_external(void* ptr, size_t bytes, dscore_memory_kind kind, MemoryUse use,
                                   std::string_view tag) {
  if (ptr == nullptr) return;
  std::shared_ptr<MemoryLedger> engine = state_->attributes ? engine_ledger() : nullptr;
  if (engine) engine->record_external(ptr, bytes, kind, use, tag);
  std::shared_ptr<MemoryLedger> replaced;
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto [it, inserted] = state_->records.try_emplace(ptr);
  if (!inserted) {
    state_->usage[kind_index(it->second.kind)].current_bytes -= it->second.bytes;
    if (it->second.engine != engine) replaced = std::move(it->second.engine);
  }
  it->second = Record{bytes, kind, use, std::string(tag.empty() ? "untagged" : tag), true, engine};
  MemoryUsage& u = state_->usage[kind_index(kind)];
  u.current_bytes += bytes;
  if (u.current_bytes > u.peak_bytes) u.peak_bytes = u.current_bytes;
  if (replaced) replaced->forget_external(ptr);
}

void MemoryLedger::forget_external(void* ptr) {
  std::shared_ptr<MemoryLedger> engine;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->records.find(ptr);
    if (it == state_->records.end() || !it->second.external) return;
    state_->usage[kind_index(it->second.kind)].current_bytes -= it->second.bytes;
    engine = std::move(it->second.engine);
    state_->records.erase(it);
  }
  if (engine) engine->forget_external(ptr);
}

MemoryUsage MemoryLedger::usage(dscore_memory_kind kind) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->usage[kind_index(kind)];
}

std::map<std::string, uint64_t> MemoryLedger::by_tag() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::map<std::string, uint64_t> out;
  for (const auto& [ptr, r] : state_->records) out[r.tag] += r.bytes;
  return out;
}

MemoryByUse MemoryLedger::by_use() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  MemoryByUse out{};
  for (const auto& [ptr, r] : state_->records) out[static_cast<size_t>(r.use)] += r.bytes;
  return out;
}

MemoryLedger& process_memory() {
  // Never destroyed: frees may come during exit.
  static MemoryLedger* ledger = [] {
    auto* l = new MemoryLedger();
    l->state_->attributes = true;
    return l;
  }();
  return *ledger;
}

void* counted_alloc(size_t bytes, size_t alignment, dscore_memory_kind kind, MemoryUse use,
                    std::string_view tag) {
  return process_memory().allocate(bytes, alignment, kind, use, tag);
}

void counted_free(void* ptr, dscore_memory_kind) { process_memory().release(ptr); }

MemoryUsage memory_usage(dscore_memory_kind kind) { return process_memory().usage(kind); }

std::map<std::string, uint64_t> memory_by_tag() { return process_memory().by_tag(); }

MemoryByUse memory_by_use() { return process_memory().by_use(); }

CountedBuffer make_counted_buffer(size_t bytes, dscore_memory_kind kind, MemoryUse use,
                                  std::string_view tag) {
  return CountedBuffer(counted_alloc(bytes, 64, kind, use, tag), CountedFree{kind});
}

}  // namespace dscore
