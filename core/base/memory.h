// Counted memory: every buffer the engine or a plugin (through host->alloc)
// takes is recorded by kind and tag, so a run can report what it holds and
// the ZeRO memory formulas can be checked against what was really allocated.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace dscore {

struct MemoryUsage {
  uint64_t current_bytes = 0;
  uint64_t peak_bytes = 0;
};

// Allocate `bytes` aligned to `alignment` (power of two; 0 means 64) of the
// given kind. Returns nullptr on failure. Pinned host memory is ordinary
// host memory locked best-effort when no accelerator runtime is present;
// device memory fails without one.
void* counted_alloc(size_t bytes, size_t alignment, dscore_memory_kind kind, std::string_view tag);
void counted_free(void* ptr, dscore_memory_kind kind);

MemoryUsage memory_usage(dscore_memory_kind kind);
// Current bytes per tag, all kinds together.
std::map<std::string, uint64_t> memory_by_tag();

// Owning handle for a counted buffer.
struct CountedFree {
  dscore_memory_kind kind = DSCORE_MEMORY_HOST;
  void operator()(void* p) const { counted_free(p, kind); }
};
using CountedBuffer = std::unique_ptr<void, CountedFree>;
CountedBuffer make_counted_buffer(size_t bytes, dscore_memory_kind kind, std::string_view tag);

}  // namespace dscore
