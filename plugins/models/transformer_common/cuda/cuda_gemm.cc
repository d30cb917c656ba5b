// gemm_ex (cuda_gemm.h): one cuBLAS call per product, dimensions checked
// against cuBLAS's int arguments.
#include "cuda_gemm.h"

#include <dscore/cpp/plugin.hpp>

#include <climits>
#include <string>

namespace dscore::gpt::gpu {
namespace {

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string("gpt (cuda): matrix ") + what + " " +
                                                  std::to_string(v) +
                                                  " does not fit cuBLAS's int dimensions");
  return static_cast<int>(v);
}

cublasOperation_t op_of(Op op) { return op == Op::kN ? CUBLAS_OP_N : CUBLAS_OP_T; }

}  // namespace

void gemm_ex(CudaContext& context, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
             const GemmMatrix& a, const GemmMatrix& b, float beta, void* c, cudaDataType_t c_type,
             int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const int im = as_int(m, "rows"), in = as_int(n, "columns"), ik = as_int(k, "inner dimension");
  const int lda = as_int(a.ld, "leading dimension"), ldb = as_int(b.ld, "leading dimension"),
            ldcc = as_int(ldc, "leading dimension");
  if (batch == 1) {
    DSCORE_GPT_CUBLAS_CHECK(cublasGemmEx(context.blas(), op_of(op_a), op_of(op_b), im, in, ik,
                                         &alpha, a.data, a.type, lda, b.data, b.type, ldb, &beta, c,
                                         c_type, ldcc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  DSCORE_GPT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      context.blas(), op_of(op_a), op_of(op_b), im, in, ik, &alpha, a.data, a.type, lda, a.stride,
      b.data, b.type, ldb, b.stride, &beta, c, c_type, ldcc, stride_c, as_int(batch, "batch count"),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace dscore::gpt::gpu
