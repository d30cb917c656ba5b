// Small kernels that exercise the CUDA emulation (emulation_kernels.cu),
// launched on one block of `threads` threads unless said otherwise. Each
// returns the launch's cudaGetLastError().
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace dscore::emulation_test {

// out[t] = in[threads - 1 - t] through dynamic shared memory; with
// `barrier` false the __syncthreads between the write and the read is left out.
cudaError_t reverse_in_block(float* out, const float* in, int threads, bool barrier);
// out[w] = the sum of in's 32 values of warp w, by shuffles (device_math.cuh).
cudaError_t warp_sums(float* out, const float* in, int threads);
// c (16 x 16, row-major, ld 16) = a (16 x 16, row-major) times b (16 x 16,
// column-major), by one warp's WMMA fragments.
cudaError_t tile_product(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b);
// out[t] = t through `bytes` of dynamic shared memory (threads 64), the
// kernel's limit raised to `limit` first.
cudaError_t dynamic_shared(float* out, int bytes, int limit);
// Thread 0 returns before the __syncthreads the others wait at.
cudaError_t early_exit(float* out, int threads);

}  // namespace dscore::emulation_test
