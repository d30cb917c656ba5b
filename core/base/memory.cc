#include "core/base/memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace dscore {
namespace {

struct Record {
  size_t bytes;
  dscore_memory_kind kind;
  std::string tag;
};

struct Ledger {
  std::mutex mutex;
  std::unordered_map<void*, Record> records;
  MemoryUsage usage[3];
};

Ledger& ledger() {
  static Ledger* l = new Ledger();  // never destroyed: frees may come during exit
  return *l;
}

int kind_index(dscore_memory_kind kind) {
  return (kind >= DSCORE_MEMORY_HOST && kind <= DSCORE_MEMORY_DEVICE) ? kind : 0;
}

}  // namespace

void* counted_alloc(size_t bytes, size_t alignment, dscore_memory_kind kind, std::string_view tag) {
  if (kind == DSCORE_MEMORY_DEVICE) return nullptr;  // no accelerator runtime in this build path
  if (alignment == 0) alignment = 64;
  if ((alignment & (alignment - 1)) != 0 || alignment < sizeof(void*)) return nullptr;
  void* ptr = nullptr;
  if (posix_memalign(&ptr, alignment, bytes == 0 ? alignment : bytes) != 0) return nullptr;
  if (kind == DSCORE_MEMORY_PINNED) (void)mlock(ptr, bytes);  // best effort without CUDA
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.records[ptr] = Record{bytes, kind, std::string(tag.empty() ? "untagged" : tag)};
  MemoryUsage& u = l.usage[kind_index(kind)];
  u.current_bytes += bytes;
  if (u.current_bytes > u.peak_bytes) u.peak_bytes = u.current_bytes;
  return ptr;
}

void counted_free(void* ptr, dscore_memory_kind kind) {
  if (ptr == nullptr) return;
  Ledger& l = ledger();
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    auto it = l.records.find(ptr);
    if (it == l.records.end()) return;  // not ours: never free what we did not allocate
    bytes = it->second.bytes;
    kind = it->second.kind;
    l.usage[kind_index(kind)].current_bytes -= bytes;
    l.records.erase(it);
  }
  if (kind == DSCORE_MEMORY_PINNED) (void)munlock(ptr, bytes);
  std::free(ptr);
}

MemoryUsage memory_usage(dscore_memory_kind kind) {
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  return l.usage[kind_index(kind)];
}

std::map<std::string, uint64_t> memory_by_tag() {
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  std::map<std::string, uint64_t> out;
  for (const auto& [ptr, r] : l.records) out[r.tag] += r.bytes;
  return out;
}

CountedBuffer make_counted_buffer(size_t bytes, dscore_memory_kind kind, std::string_view tag) {
  return CountedBuffer(counted_alloc(bytes, 64, kind, tag), CountedFree{kind});
}

}  // namespace dscore
