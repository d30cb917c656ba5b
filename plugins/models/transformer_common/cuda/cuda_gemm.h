// Matrix products for the GPT model's CUDA backend, through cuBLAS
// (cublasGemmEx / cublasGemmStridedBatchedEx) with fp32 accumulation
// (CUBLAS_COMPUTE_32F: true fp32 for fp32 data, no TF32), on the context's
// stream and workspace, so results repeat exactly run to run. cuBLAS is
// column-major: a row-major (rows, cols) buffer is its (cols, rows) matrix,
// which is how the callers write every product.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "cuda_context.h"

namespace dscore::gpt::gpu {

enum class Op { kN, kT };

template <typename X>
constexpr cudaDataType_t data_type() {
  static_assert(std::is_same_v<X, float> || std::is_same_v<X, __nv_bfloat16>, "fp32 or bf16 only");
  return std::is_same_v<X, float> ? CUDA_R_32F : CUDA_R_16BF;
}

struct GemmMatrix {
  const void* data;
  cudaDataType_t type;
  int64_t ld;      // leading dimension (column-major)
  int64_t stride;  // elements between consecutive matrices of a batch
};

// C (m x n) = alpha op(A) op(B) + beta C, `batch` times (strided), column-major.
void gemm_ex(CudaContext& context, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
             const GemmMatrix& a, const GemmMatrix& b, float beta, void* c, cudaDataType_t c_type,
             int64_t ldc, int64_t stride_c, int64_t batch);

template <typename A, typename B, typename Out>
void gemm(CudaContext& context, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
          const A* a, int64_t lda, const B* b, int64_t ldb, float beta, Out* c, int64_t ldc,
          int64_t batch = 1, int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0) {
  gemm_ex(context, op_a, op_b, m, n, k, alpha, GemmMatrix{a, data_type<A>(), lda, stride_a},
          GemmMatrix{b, data_type<B>(), ldb, stride_b}, beta, c, data_type<Out>(), ldc, stride_c,
          batch);
}

}  // namespace dscore::gpt::gpu
