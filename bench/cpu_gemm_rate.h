// The CPU's best dense matrix-multiply rate, measured in the running
// process: the limit CPU GPT figures (tokens/s as FLOP/s) are read against.
// The best of every way the build can multiply: one full-size OpenBLAS call
// on all cores, and the gpt plugin's own path (single-threaded OpenBLAS
// calls on fixed blocks, TBB across the cores). bf16: the gpt plugin's bf16
// GEMM (gemm_bf16.h: dscore's AMX tiles where the CPU has AMX, and
// oneDNN's single-threaded calls on the same blocks, both measured there;
// oneDNN alone on a CPU with avx512_bf16 only) where the build and the CPU
// have it (Debian's OpenBLAS has no sbgemm), else reported as absent with
// the reason. cpu_gemm_rate_main.cc prints it;
// benches link dscore_cpu_gemm_rate and call measure_cpu_gemm_rate().
#pragma once

#include <cstdint>
#include <string>

namespace dscore::bench {

struct CpuGemmRate {
  int64_t n = 0;                  // square n x n x n products, fp32
  int threads = 0;                // the cores used
  double fp32_gflops = 0;         // the best of the ways below
  std::string fp32_how;           // which way gave it
  double openblas_gflops = 0;     // one OpenBLAS call, `threads` OpenBLAS threads
  std::string openblas_core;      // the core it ran (blas_library.h chose it from the flags)
  double blocked_gflops = 0;      // the gpt plugin's gemm(): blocks over TBB
  bool cpu_has_bf16 = false;      // avx512_bf16 or AMX
  double bf16_gflops = 0;         // the plugin's gemm_bf16 (blocks over TBB); 0 where absent
  std::string bf16_how;           // which kernel gemm_bf16 ran
  double bf16_onednn_gflops = 0;  // oneDNN's, where AMX tiles gave bf16_gflops; else 0
  std::string bf16_absent;        // why there is no bf16 GEMM here ("" when measured)
};

// Best of `repeats` products of each way after one warm-up, on `threads`
// cores (0: every CPU this process may use). Leaves OpenBLAS single-threaded
// afterwards, as the gpt plugin runs it.
CpuGemmRate measure_cpu_gemm_rate(int64_t n = 2048, int repeats = 5, int threads = 0);

// "limit measured now: fp32 GEMM 165.3 GFLOP/s on 2 cores (...)".
std::string describe(const CpuGemmRate& rate);

}  // namespace dscore::bench
