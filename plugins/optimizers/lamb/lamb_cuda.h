// The CUDA path of the lamb plugin (built only with DSCORE_WITH_CUDA): three
// multi-tensor kernels on the caller's stream (moments and per-chunk norms;
// per-tensor trust ratio; update and 16-bit copy), following lamb_update.h
// rounding for rounding and reduction for reduction, so a CUDA step equals
// the CPU step bit for bit. Scratch (16 bytes per 65536 elements, 4 per
// tensor) is stream-ordered (cudaMallocAsync/cudaFreeAsync): nothing waits.
#pragma once

#include <cstddef>

#include "lamb_update.h"

namespace dscore::lamb {

// Enqueues the update of `count` device tensors on `stream` (a
// cudaStream_t; NULL = the legacy default stream) and returns. Throws
// sdk::Error(INTERNAL) naming the CUDA call when a launch or the scratch
// allocation fails.
void lamb_step_cuda(const LambConstants& k, const LambTensor* tensors, size_t count, void* stream);

}  // namespace dscore::lamb
