// The CUDA path of the adam plugin (built only with DSCORE_WITH_CUDA): a
// multi-tensor kernel, one launch per batch of up to kMaxTensorsPerLaunch
// tensors that share gradient and 16-bit-copy dtypes, vectorised 16-byte
// loads, and the element math of adam_update.h with explicitly rounded
// intrinsics, so a CUDA step equals the CPU step bit for bit.
#pragma once

#include <cstddef>

#include "adam_cpu.h"

namespace dscore::adam {

// Enqueues the update of `count` device tensors on `stream` (a
// cudaStream_t; NULL = the legacy default stream) and returns. Throws
// sdk::Error(INTERNAL) naming the CUDA call when a launch fails.
void adam_step_cuda(const AdamConstants& k, const AdamTensor* tensors, size_t count, void* stream);

}  // namespace dscore::adam
