// Row-major fp32 matrix products for the Newton-Schulz iteration: each
// element of C summed over k in order (k = 0, 1, ...) in fp32, rows of C
// split over TBB tasks (so results do not depend on the thread count).
// A plain loop the compiler vectorises over C's columns; no BLAS, which is
// the models' to load (plugins include only their kind's code).
#pragma once

#include <cstdint>

namespace dscore::muon {

// C (r x n) = A (r x k) B, B k x n, or A B^T with B n x k when
// `transpose_b`; `accumulate`: C += instead of C =.
void matmul(const float* a, const float* b, float* c, int64_t r, int64_t k, int64_t n,
            bool transpose_b, bool accumulate);

}  // namespace dscore::muon
