#include "gemm.h"

#include <cblas.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <mutex>

namespace dscore::transformer::cpu {
namespace {

// Below this many multiply-adds a split costs more than it gains.
constexpr int64_t kSerialWork = int64_t{1} << 18;
// Rows (or columns) of C per task: a function of the shape alone, so
// results do not depend on how many threads run them (OpenBLAS's result for
// an element does depend on how the call is cut). Each task packs the whole
// other operand again, so blocks are large: up to 256 rows, at least 4
// tasks. Measured on the GPT's shapes (2 cores, AVX2), 256-row blocks ran
// 5-15% faster than 128 and up to 40% faster than 64.
constexpr int64_t kMaxBlock = 256;
constexpr int64_t kMinBlock = 64;
int64_t block_for(int64_t extent) {
  const int64_t quarter = ((extent + 3) / 4 + 31) / 32 * 32;
  return std::clamp(quarter, kMinBlock, kMaxBlock);
}

CBLAS_TRANSPOSE blas_op(Op op) { return op == Op::kTranspose ? CblasTrans : CblasNoTrans; }

void blas_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, blas_op(op_a), blas_op(op_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void blas_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, blas_op(op_a), blas_op(op_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

template <typename T>
void gemm_serial(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  blas_gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (m * n * k < kSerialWork || (m <= kMinBlock && n <= kMinBlock)) {
    blas_gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the longer side of C. Row i of op(A) starts at a + i*lda
  // (untransposed) or a + i (transposed); likewise column j of op(B).
  if (m >= n) {
    const int64_t block = block_for(m);
    tbb::parallel_for(int64_t{0}, (m + block - 1) / block, [&](int64_t blk) {
      const int64_t i0 = blk * block, rows = std::min(block, m - i0);
      const T* a0 = op_a == Op::kNone ? a + i0 * lda : a + i0;
      blas_gemm(op_a, op_b, rows, n, k, alpha, a0, lda, b, ldb, beta, c + i0 * ldc, ldc);
    });
  } else {
    const int64_t block = block_for(n);
    tbb::parallel_for(int64_t{0}, (n + block - 1) / block, [&](int64_t blk) {
      const int64_t j0 = blk * block, cols = std::min(block, n - j0);
      const T* b0 = op_b == Op::kNone ? b + j0 : b + j0 * ldb;
      blas_gemm(op_a, op_b, m, cols, k, alpha, a, lda, b0, ldb, beta, c + j0, ldc);
    });
  }
}

template void gemm<float>(Op, Op, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(Op, Op, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm_serial<float>(Op, Op, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                 const float*, int64_t, float, float*, int64_t);
template void gemm_serial<double>(Op, Op, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                  const double*, int64_t, double, double*, int64_t);

}  // namespace dscore::transformer::cpu
