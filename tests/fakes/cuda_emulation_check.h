// Whether the CUDA device the tests see is the CPU emulation of CUDA
// (tests/cuda_emulation, the `emulated` preset). Its streams run work when
// it is enqueued, so a test that holds a stream behind a host function
// until the caller does something cannot run there, and skips.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>

namespace dscore::testing {

inline constexpr const char* kCudaEmulationName = "CUDA emulation (CPU)";

inline bool on_cuda_emulation() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess &&
         std::strcmp(prop.name, kCudaEmulationName) == 0;
}

}  // namespace dscore::testing

#define DSCORE_SKIP_ON_CUDA_EMULATION()                                                  \
  if (::dscore::testing::on_cuda_emulation())                                            \
  GTEST_SKIP() << "the CUDA emulation runs a stream's work when it is enqueued; a held " \
                  "stream needs a GPU"
