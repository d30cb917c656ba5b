// bench/gpu_matmul_rate: the current GPU's cuBLAS GEMM rate, bf16 (tensor
// cores, fp32 accumulation) and fp32 (no TF32), on square n x n matrices:
// the limit the GPU figures are read against (bench/README.md).
//
//   gpu_matmul_rate [--n 8192] [--iterations 20]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "gpu_matmul_rate.h"

int main(int argc, char** argv) {
  int64_t n = 8192;
  int iterations = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--n" && i + 1 < argc) {
      n = std::atoll(argv[++i]);
    } else if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: gpu_matmul_rate [--n 8192] [--iterations 20]\n");
      return 2;
    }
  }
  try {
    const dscore::bench::GpuMatmulRate r = dscore::bench::measure_gpu_matmul_rate(n, iterations);
    std::printf(
        "gpu_matmul_rate: %s, cuBLAS GEMM %lld x %lld x %lld, %d iterations after 3 warm-up\n",
        r.device.c_str(), static_cast<long long>(r.n), static_cast<long long>(r.n),
        static_cast<long long>(r.n), iterations);
    std::printf("  bf16 (fp32 accumulation)  %8.1f TFLOP/s\n", r.bf16_tflops);
    std::printf("  fp32 (no TF32)            %8.1f TFLOP/s\n", r.fp32_tflops);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_matmul_rate: %s\n", e.what());
    return 1;
  }
  return 0;
}
