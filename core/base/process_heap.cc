#include "core/base/process_heap.h"

#include <cstdlib>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dscore {

Result<HeapPolicy> heap_policy_from_env() {
  const char* value = std::getenv("DSCORE_MALLOC");
  const std::string text = value != nullptr ? value : "";
  if (text.empty() || text == "keep") return HeapPolicy::kKeepFreed;
  if (text == "system") return HeapPolicy::kSystem;
  return invalid_argument("DSCORE_MALLOC=\"" + text +
                          "\": expected \"keep\" (freed memory stays in the process for reuse, "
                          "the default) or \"system\" (the C library's defaults)");
}

bool keep_freed_memory_in_process() {
#if defined(__GLIBC__)
  // Each setting alone is not enough: with mmap'd blocks allowed, anything
  // above 32 MiB is unmapped on free; with more arenas, the other threads'
  // heaps (64 MiB at most each) are unmapped when they empty; and an
  // explicit trim threshold would also fix the mmap threshold at 128 KiB.
  return mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_MAX, 0) == 1 &&
         mallopt(M_TRIM_THRESHOLD, -1) == 1;  // -1: the largest size_t, never trim
#else
  return false;
#endif
}

Result<bool> apply_heap_policy_from_env() {
  const Result<HeapPolicy> policy = heap_policy_from_env();
  if (!policy.ok()) return policy.status();
  return *policy == HeapPolicy::kKeepFreed && keep_freed_memory_in_process();
}

}  // namespace dscore
