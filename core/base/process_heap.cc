#include "core/base/process_heap.h"

#include <cstdlib>
#include <string_view>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dscore {

bool keep_freed_memory_in_process() {
  if (const char* env = std::getenv("DSCORE_MALLOC");
      env != nullptr && std::string_view(env) == "system")
    return false;
#if defined(__GLIBC__)
  // Each setting alone is not enough: with mmap'd blocks allowed, anything
  // above 32 MiB is unmapped on free; with more arenas, the other threads'
  // heaps (64 MiB at most each) are unmapped when they empty; and an
  // explicit trim threshold would also fix the mmap threshold at 128 KiB.
  const bool applied = mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_MAX, 0) == 1 &&
                       mallopt(M_TRIM_THRESHOLD, -1) == 1;  // -1: the largest size_t
  return applied;
#else
  return false;
#endif
}

}  // namespace dscore
