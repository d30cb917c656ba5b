// The GPU's dense matrix-multiply rate, measured with cuBLAS in the running
// process: the limit GPU figures (GPT tokens/s, model FLOP/s) are read
// against. gpu_matmul_rate_main.cc prints it; a GPT bench links
// dscore_gpu_matmul_rate and calls measure_gpu_matmul_rate() in its own run.
#pragma once

#include <cstdint>
#include <string>

namespace dscore::bench {

struct GpuMatmulRate {
  std::string device;      // cudaDeviceProp::name of the current device
  int64_t n = 0;           // square n x n x n products
  double bf16_tflops = 0;  // bf16 inputs and output, fp32 accumulation (tensor cores)
  double fp32_tflops = 0;  // fp32 throughout, no TF32 (what "cuda_dtype": "fp32" runs)
};

// Times `iterations` products of each type after 3 warm-up products, on the
// current device, with cudaEvent timing. 2 n^3 FLOP per product. Needs about
// 3 n^2 x 4 bytes of GPU memory (768 MiB at n = 8192). Throws
// std::runtime_error naming the failed call.
GpuMatmulRate measure_gpu_matmul_rate(int64_t n = 8192, int iterations = 20);

}  // namespace dscore::bench
