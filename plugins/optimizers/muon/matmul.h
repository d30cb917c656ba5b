// Row-major fp32 matrix products for the Newton-Schulz iteration, split
// over TBB tasks by fixed blocks of rows of C (results do not depend on the
// thread count). They run on OpenBLAS's sgemm when this process has loaded
// it already (the gpt and llama models load it at creation, with its core
// chosen from the CPU's flags: transformer_common/cpu/blas_library.h), so
// muon never picks a BLAS core itself; otherwise on a plain loop (each
// element summed over k in order in fp32). Which one is logged once.
#pragma once

#include <cstdint>
#include <string>

namespace dscore::muon {

// C (r x n) = A (r x k) B, B k x n, or A B^T with B n x k when
// `transpose_b`; `accumulate`: C += instead of C =.
void matmul(const float* a, const float* b, float* c, int64_t r, int64_t k, int64_t n,
            bool transpose_b, bool accumulate);

// The route, for the log: "OpenBLAS <config> (core <name>)" or the loop's.
std::string matmul_route();

}  // namespace dscore::muon
