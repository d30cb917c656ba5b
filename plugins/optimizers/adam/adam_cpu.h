// The Adam CPU step over many tensors: split into chunks, run in parallel
// with TBB, each chunk by the widest element kernel the CPU offers, chosen at
// run time: AVX-512F (adam_avx512.cc), else AVX2+FMA+F16C (adam_avx2.cc),
// else the portable reference loop of adam_update.h. All three give
// bit-identical results, so a run's numbers do not depend on the machine.
#pragma once

#include <dscore/plugin.h>
#include <dscore/cpp/cpu_isa.hpp>

#include <cstddef>
#include <cstdint>

#include "../adam_common/adam_update.h"

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

using Isa = sdk::CpuIsa;  // ordered: a wider kernel compares greater

// The widest kernel this CPU can run: kAvx2 needs AVX2, FMA and F16C;
// kAvx512 needs those and AVX-512F.
Isa cpu_isa();
// The kernel the plugin uses: cpu_isa(), lowered by the environment variable
// DSCORE_CPU_ISA=avx2|scalar (the knob the transformer CPU kernels read), so
// tests and benches can compare the paths on one machine. Read once.
Isa best_isa();
// `available` lowered by a DSCORE_CPU_ISA value (NULL: unchanged). An
// unknown value is reported on stderr and ignored.
inline Isa lowered_isa(Isa available, const char* cap) {
  return sdk::lowered_cpu_isa(available, cap, "adam cpu kernel");
}
inline const char* isa_name(Isa isa) { return sdk::cpu_isa_name(isa); }

// Updates every tensor in place with `isa`'s kernel, in parallel over the
// cores (TBB's current arena). Returns when done.
void adam_step_cpu(const AdamConstants& k, const AdamTensor* tensors, size_t count, Isa isa);

// TBB's worker threads outlive the tasks they ran; a host that unloads the
// plugin (and with it libtbb) must not find them still running. The
// library's init() attaches to the scheduler and its shutdown() waits for
// the workers to exit (a no-op when others in the process still use TBB).
void attach_cpu_threads();
void release_cpu_threads();

// The vector kernels for elements [begin, end) of one tensor. Only call one
// the CPU runs (cpu_isa() at least its ISA).
void adam_avx2_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end);
void adam_avx512_range(const AdamConstants& k, const AdamTensor& t, int64_t begin, int64_t end);

}  // namespace dscore::adam
