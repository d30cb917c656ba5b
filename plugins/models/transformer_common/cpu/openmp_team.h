// Debian's oneDNN runs its primitives (and its sgemm) on OpenMP. Each call
// the kernels make into it is one block of a product already spread over
// the cores by TBB, so every calling thread asks OpenMP for a team of one:
// no OpenMP team is ever started beside TBB's threads, and each block's
// result is that of a single-threaded call. Only with DSCORE_WITH_ONEDNN.
#pragma once

#include <omp.h>

namespace dscore::transformer::cpu {

inline void single_threaded_openmp() {
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

}  // namespace dscore::transformer::cpu
