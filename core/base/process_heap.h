// How this process's heap hands memory back to the kernel. glibc returns
// large freed blocks at once (each above its mmap threshold is unmapped;
// the heaps of the arenas other threads use are shrunk or unmapped when
// they empty), and every page that comes back is a fresh one the kernel
// zeroes on first touch. ZeRO-3 frees and allocates the same buffers every
// step (the gathered layers, the gradient pieces), so a rank at 2 ranks
// faulted in about 1.2 GB of zeroed pages per step (the ~100M Llama,
// fp32; bench/README.md).
#pragma once

#include "core/base/status.h"

namespace dscore {

enum class HeapPolicy {
  kKeepFreed,  // keep_freed_memory_in_process() below
  kSystem,     // the C library's defaults
};

// DSCORE_MALLOC: unset, empty or "keep" -> kKeepFreed; "system" -> kSystem;
// anything else is an error naming both.
Result<HeapPolicy> heap_policy_from_env();

// Keeps what the process frees for its own reuse: one malloc arena, no
// mmap'd blocks, no trimming (glibc's mallopt). The resident set then
// stays at the heap's high-water mark, which is the peak `dscore plan`
// counts (its allocator slack covers the fragmentation). Call before any
// thread starts; `dscore run` does once the config is read, unless
// DSCORE_MALLOC=system or the run offloads (whose buffers of changing sizes
// grew such a heap to 1.19x the usual peak RSS), and a trainer that embeds
// the engine may. Returns whether the C library took the settings (not
// under a sanitizer's allocator, nor a C library other than glibc).
bool keep_freed_memory_in_process();

// The two above as `dscore run` and the benches start: the policy the
// environment names, applied. True where freed memory is now kept.
Result<bool> apply_heap_policy_from_env();

}  // namespace dscore
