// cuBLAS for the CUDA emulation: the GEMMs dscore's CUDA backend calls
// (cublasGemmEx, cublasGemmStridedBatchedEx), column-major as cuBLAS, fp32
// and bf16 operands and results: operands widened to fp32, the product by
// OpenBLAS's sgemm (fp32 sums, in its order, as cuBLAS's order is its
// own), results rounded once to nearest even. A GEMM runs on the handle's
// stream (streams.cc), alpha and beta read when it is called (host
// pointer mode); workspaces are ignored.
#include <cblas.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_emulation.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float load(cudaDataType type, const void* p, int64_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

void store(cudaDataType type, void* p, int64_t i, float v) {
  if (type == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

bool supported(cudaDataType type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }

// X (rows x cols, column-major, leading dimension ld) widened to fp32.
std::vector<float> widened(cudaDataType type, const void* x, int64_t rows, int64_t cols, int ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r)
      out[static_cast<size_t>(c * rows + r)] = load(type, x, c * ld + r);
  return out;
}

void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
          const void* a, cudaDataType at, int lda, const void* b, cudaDataType bt, int ldb,
          float beta, void* c, cudaDataType ct, int ldc) {
  // As stored: A is m x k (k x m transposed), B is k x n (n x k transposed).
  const bool a_n = ta == CUBLAS_OP_N, b_n = tb == CUBLAS_OP_N;
  const auto wa = widened(at, a, a_n ? m : k, a_n ? k : m, lda);
  const auto wb = widened(bt, b, b_n ? k : n, b_n ? n : k, ldb);
  // cuBLAS reads no C when beta is 0.
  auto wc =
      beta == 0.0f ? std::vector<float>(static_cast<size_t>(m) * n) : widened(ct, c, m, n, ldc);
  if (m > 0 && n > 0)
    cblas_sgemm(CblasColMajor, a_n ? CblasNoTrans : CblasTrans, b_n ? CblasNoTrans : CblasTrans, m,
                n, k, alpha, wa.data(), a_n ? m : k, wb.data(), b_n ? k : n, beta, wc.data(), m);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) store(ct, c, j * ldc + i, wc[static_cast<size_t>(j * m + i)]);
}

}  // namespace

extern "C" {

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "a cuBLAS emulation error";
}

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (!supported(Atype) || !supported(Btype) || !supported(Ctype) ||
      computeType != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const size_t as = Atype == CUDA_R_32F ? 4 : 2, bs = Btype == CUDA_R_32F ? 4 : 2,
               cs = Ctype == CUDA_R_32F ? 4 : 2;
  dscore::cuda_emulation::enqueue(handle->stream, [=] {
    for (int64_t i = 0; i < batchCount; ++i)
      gemm(transa, transb, m, n, k, a, static_cast<const char*>(A) + i * strideA * as, Atype, lda,
           static_cast<const char*>(B) + i * strideB * bs, Btype, ldb, b,
           static_cast<char*>(C) + i * strideC * cs, Ctype, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                                    Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

}  // extern "C"
