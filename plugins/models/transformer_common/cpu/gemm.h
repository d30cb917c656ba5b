// Row-major GEMM for the CPU kernels: C = alpha * op(A) * op(B) + beta * C
// through OpenBLAS (sgemm/dgemm; fp32 on oneDNN's sgemm where OpenBLAS runs
// a core below the CPU's flags, blas_library.h), split over TBB tasks by
// fixed blocks of rows or columns of C. BLAS itself runs single-threaded:
// all parallelism comes from TBB, so BLAS calls
// made inside TBB tasks (attention, per head) do not oversubscribe, and the
// fixed blocks make every result independent of the thread count.
#pragma once

#include <cstdint>

namespace dscore::transformer::cpu {

enum class Op { kNone, kTranspose };

// Loads OpenBLAS (its core chosen from the CPU's flags) and logs the choice;
// once per process, before the first gemm. Throws sdk::Error where the
// library cannot be loaded.
void load_gemm_library();

// M x N result; K the inner dimension. lda/ldb/ldc are row strides.
template <typename T>
void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// The same, on the calling thread only (inside a parallel loop).
template <typename T>
void gemm_serial(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace dscore::transformer::cpu
