// The Adam CPU step over many tensors: split into chunks, run in parallel
// with TBB, each chunk by the best element kernel the CPU offers (AVX2+FMA+
// F16C when present, chosen at run time, else the portable reference loop of
// adam_update.h). Both kernels give bit-identical results.
#pragma once

#include <dscore/plugin.h>

#include <cstddef>
#include <cstdint>

#include "adam_update.h"

namespace dscore::adam {

// One tensor of a step, as raw buffers (already checked by the caller).
struct AdamTensor {
  float* param;       // (numel) fp32 master weights
  const void* grad;   // (numel) grad_dtype
  float* exp_avg;     // (numel) fp32
  float* exp_avg_sq;  // (numel) fp32
  void* param_16bit;  // (numel) out16_dtype, or NULL
  int64_t numel;
  dscore_dtype grad_dtype;   // F32, BF16 or F16
  dscore_dtype out16_dtype;  // F32, BF16, F16, or INVALID when param_16bit is NULL
};

enum class Isa { kScalar, kAvx2 };

// The widest kernel this CPU runs: kAvx2 needs AVX2, FMA and F16C.
Isa best_isa();
const char* isa_name(Isa isa);

// Updates every tensor in place with `isa`'s kernel, in parallel over the
// cores (TBB's current arena). Returns when done.
void adam_step_cpu(const AdamConstants& k, const AdamTensor* tensors, size_t count, Isa isa);

// TBB's worker threads outlive the tasks they ran; a host that unloads the
// plugin (and with it libtbb) must not find them still running. The
// library's init() attaches to the scheduler and its shutdown() waits for
// the workers to exit (a no-op when others in the process still use TBB).
void attach_cpu_threads();
void release_cpu_threads();

// The AVX2 kernel for elements [begin, end) of one tensor (adam_avx2.cc).
// Only call it when best_isa() == kAvx2.
void adam_avx2_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end);

}  // namespace dscore::adam
