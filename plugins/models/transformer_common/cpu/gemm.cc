#include "gemm.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "blas_library.h"
#include "gemm_blocks.h"

#ifdef DSCORE_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "openmp_team.h"
#endif

namespace dscore::transformer::cpu {
namespace {

CBLAS_TRANSPOSE blas_op(Op op) { return op == Op::kTranspose ? CblasTrans : CblasNoTrans; }

void blas_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef DSCORE_WITH_ONEDNN
  if (fp32_backend() == Fp32Backend::kOneDnn) {
    single_threaded_openmp();
    const dnnl_status_t status =
        dnnl_sgemm(op_a == Op::kTranspose ? 'T' : 'N', op_b == Op::kTranspose ? 'T' : 'N', m, n, k,
                   alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success)
      throw std::runtime_error("oneDNN's sgemm failed with status " + std::to_string(status));
    return;
  }
#endif
  blas_library().sgemm(CblasRowMajor, blas_op(op_a), blas_op(op_b), static_cast<blasint>(m),
                       static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                       static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                       static_cast<blasint>(ldc));
}

void blas_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_library().dgemm(CblasRowMajor, blas_op(op_a), blas_op(op_b), static_cast<blasint>(m),
                       static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                       static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                       static_cast<blasint>(ldc));
}

}  // namespace

void load_gemm_library() {
  blas_library();
#ifdef DSCORE_WITH_ONEDNN
  // oneDNN generates its sgemm kernels and maps their code on the first
  // product: done here, with the model, so that the memory it takes is in
  // the process the engine measures before training (job_fit.cc), as
  // OpenBLAS's is once loaded.
  static const bool warmed = [] {
    if (fp32_backend() != Fp32Backend::kOneDnn) return false;
    constexpr int64_t kN = 256;
    std::vector<float> a(kN * kN, 1.0f), b(kN * kN, 1.0f), c(kN * kN);
    for (Op op_b : {Op::kNone, Op::kTranspose})
      for (Op op_a : {Op::kNone, Op::kTranspose})
        blas_gemm(op_a, op_b, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
    return true;
  }();
  (void)warmed;
#endif
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
  gemm_in_blocks(op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc,
                 [&](int64_t rows, int64_t cols, const T* a0, const T* b0, T* c0) {
                   blas_gemm(op_a, op_b, rows, cols, k, alpha, a0, lda, b0, ldb, beta, c0, ldc);
                 });
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
