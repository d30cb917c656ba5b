// adam_step_cpu: chunking, run-time kernel choice and the TBB loop (see
// adam_cpu.h). Chunks are a fixed number of elements so a model of many
// small tensors and one of a few huge ones both spread over every core.
#include "adam_cpu.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace dscore::adam {
namespace {

// 32768 elements = 896 KiB of fp32 Adam traffic: big enough that the
// scheduling cost vanishes, small enough to balance 100M parameters over
// many cores. A multiple of the AVX2 and AVX-512 widths, so only a
// tensor's last chunk has a scalar tail.
constexpr int64_t kChunkElements = 32768;

struct Chunk {
  size_t tensor;
  int64_t begin;
  int64_t end;
};

void scalar_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end) {
  sdk::with_float_dtype(t.grad_dtype, [&](auto g) {
    sdk::with_output_dtype(t.out16_dtype, [&](auto o) {
      adam_update<decltype(g)::value, decltype(o)::value>(k, begin, end, t.param, t.grad, t.exp_avg,
                                                          t.exp_avg_sq, t.param_16bit);
    });
  });
}

tbb::task_scheduler_handle& scheduler_handle() {
  static tbb::task_scheduler_handle handle;
  return handle;
}

}  // namespace

void attach_cpu_threads() {
  if (!scheduler_handle()) scheduler_handle() = tbb::task_scheduler_handle(tbb::attach{});
}

void release_cpu_threads() {
  if (scheduler_handle()) (void)tbb::finalize(scheduler_handle(), std::nothrow);
}

Isa cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  static const Isa isa = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
      return Isa::kScalar;
    // libgcc's check includes the OS saving the AVX-512 registers (XCR0).
    return __builtin_cpu_supports("avx512f") ? Isa::kAvx512 : Isa::kAvx2;
  }();
  return isa;
#else
  return Isa::kScalar;
#endif
}

Isa best_isa() {
  static const Isa isa = lowered_isa(cpu_isa(), std::getenv("DSCORE_CPU_ISA"));
  return isa;
}

void adam_step_cpu(const AdamConstants& k, const AdamTensor* tensors, size_t count, Isa isa) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < count; ++i)
    for (int64_t b = 0; b < tensors[i].numel; b += kChunkElements)
      chunks.push_back({i, b, std::min(tensors[i].numel, b + kChunkElements)});
  auto run = [&](const Chunk& c) {
    const AdamTensor& t = tensors[c.tensor];
    switch (isa) {
      case Isa::kAvx512:
        return adam_avx512_range(k, t, c.begin, c.end);
      case Isa::kAvx2:
        return adam_avx2_range(k, t, c.begin, c.end);
      case Isa::kScalar:
        break;
    }
    scalar_range(k, t, c.begin, c.end);
  };
  if (chunks.size() == 1) {  // no task overhead for a single small tensor
    run(chunks[0]);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks.size()),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t c = r.begin(); c != r.end(); ++c) run(chunks[c]);
                    });
}

}  // namespace dscore::adam
