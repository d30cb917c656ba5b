#include "host_memory_rate.h"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

namespace dscore::bench {

double measure_host_memory_rate() {
  using Clock = std::chrono::steady_clock;
  const size_t bytes = size_t{1} << 30;
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  constexpr size_t kPieces = 256;
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t = Clock::now();
    tbb::parallel_for(size_t{0}, kPieces, [&](size_t p) {
      const size_t piece = bytes / kPieces;
      std::memcpy(b.get() + p * piece, a.get() + p * piece, piece);
    });
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
  }
  return 2.0 * static_cast<double>(bytes) / best;
}

}  // namespace dscore::bench
