// Small helpers shared by the offload sources (private to core/offload): the
// timing and the aligned transfer buffers of the disk probe and the swap
// bandwidth measurement.
#pragma once

#include <chrono>
#include <cstdlib>

namespace dscore::offload {

// Seconds from `start` to now, on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Frees a std::aligned_alloc buffer held by a std::unique_ptr.
struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace dscore::offload
