// measure_gpu_matmul_rate (gpu_matmul_rate.h): cublasGemmEx on square
// matrices filled with small pseudo-random values (not zeros: the tensor
// cores' power, hence clock, depends on the data), timed with events.
#include "gpu_matmul_rate.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace dscore::bench {
namespace {

void check(cudaError_t err, const char* call) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(err));
}
void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + ": " + cublasGetStatusString(status));
}
#define BENCH_CHECK(call) check((call), #call)

// n*n values in [-1, 1) as fp32 bits, or as bf16 bits (truncated: only the
// spread of values matters here).
std::vector<unsigned char> fill(int64_t count, bool bf16) {
  std::vector<unsigned char> bytes(static_cast<size_t>(count) * (bf16 ? 2 : 4));
  uint32_t state = 12345;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (bf16) {
      const uint16_t half = static_cast<uint16_t>(bits >> 16);
      std::memcpy(bytes.data() + 2 * i, &half, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &bits, 4);
    }
  }
  return bytes;
}

struct Device {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* workspace = nullptr;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Device() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (blas != nullptr) cublasDestroy(blas);
    for (void* p : {a, b, c, workspace})
      if (p != nullptr) cudaFree(p);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

double tflops(Device& d, int64_t n, int iterations, bool bf16) {
  const size_t bytes = static_cast<size_t>(n * n) * (bf16 ? 2 : 4);
  const std::vector<unsigned char> host = fill(n * n, bf16);
  BENCH_CHECK(cudaMemcpy(d.a, host.data(), bytes, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d.b, host.data(), bytes, cudaMemcpyHostToDevice));
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(n);
  auto gemm = [&] {
    BENCH_CHECK(cublasGemmEx(d.blas, CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &alpha, d.a, type, m, d.b,
                             type, m, &beta, d.c, type, m, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 3; ++i) gemm();
  BENCH_CHECK(cudaEventRecord(d.start, d.stream));
  for (int i = 0; i < iterations; ++i) gemm();
  BENCH_CHECK(cudaEventRecord(d.stop, d.stream));
  BENCH_CHECK(cudaEventSynchronize(d.stop));
  float ms = 0;
  BENCH_CHECK(cudaEventElapsedTime(&ms, d.start, d.stop));
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) *
         iterations / (ms * 1e-3) / 1e12;
}

}  // namespace

GpuMatmulRate measure_gpu_matmul_rate(int64_t n, int iterations) {
  if (n <= 0 || n > 46340 || iterations <= 0)
    throw std::runtime_error("measure_gpu_matmul_rate: bad n or iterations");
  GpuMatmulRate rate;
  rate.n = n;
  int device = 0;
  BENCH_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  rate.device = prop.name;
  Device d;
  const size_t bytes = static_cast<size_t>(n * n) * 4;  // room for fp32
  BENCH_CHECK(cudaMalloc(&d.a, bytes));
  BENCH_CHECK(cudaMalloc(&d.b, bytes));
  BENCH_CHECK(cudaMalloc(&d.c, bytes));
  BENCH_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
  BENCH_CHECK(cudaEventCreate(&d.start));
  BENCH_CHECK(cudaEventCreate(&d.stop));
  BENCH_CHECK(cublasCreate(&d.blas));
  BENCH_CHECK(cublasSetStream(d.blas, d.stream));
  constexpr size_t kWorkspace = size_t{32} << 20;
  BENCH_CHECK(cudaMalloc(&d.workspace, kWorkspace));
  BENCH_CHECK(cublasSetWorkspace(d.blas, d.workspace, kWorkspace));
  rate.bf16_tflops = tflops(d, n, iterations, true);
  rate.fp32_tflops = tflops(d, n, iterations, false);
  return rate;
}

}  // namespace dscore::bench
