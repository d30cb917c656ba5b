// The kernels of emulation_kernels.h, written as for nvcc.
#include <mma.h>

#include "../../plugins/models/transformer_common/cuda/device_math.cuh"
#include "emulation_kernels.h"

namespace dscore::emulation_test {
namespace {

using transformer::gpu::launched;
using transformer::gpu::warp_sum;

__global__ void reverse_kernel(float* out, const float* in, bool barrier) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* values = reinterpret_cast<float*>(smem);
  values[threadIdx.x] = in[threadIdx.x];
  if (barrier) __syncthreads();
  out[threadIdx.x] = values[blockDim.x - 1 - threadIdx.x];
}

__global__ void warp_sums_kernel(float* out, const float* in) {
  const float sum = warp_sum(in[threadIdx.x]);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = sum;
}

__global__ void tile_product_kernel(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(32) __nv_bfloat16 a_tile[256], b_tile[256];
  __shared__ __align__(32) float c_tile[256];
  for (int i = threadIdx.x; i < 256; i += 32) a_tile[i] = a[i], b_tile[i] = b[i];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a_tile, 16);
  wmma::load_matrix_sync(fb, b_tile, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c_tile, fc, 16, wmma::mem_row_major);
  __syncwarp();
  for (int i = threadIdx.x; i < 256; i += 32) c[i] = c_tile[i];
}

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* values = reinterpret_cast<float*>(smem);
  values[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = values[threadIdx.x];
}

__global__ void early_exit_kernel(float* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

}  // namespace

cudaError_t reverse_in_block(float* out, const float* in, int threads, bool barrier) {
  reverse_kernel<<<1, threads, threads * sizeof(float)>>>(out, in, barrier);
  return launched();
}

cudaError_t warp_sums(float* out, const float* in, int threads) {
  warp_sums_kernel<<<1, threads>>>(out, in);
  return launched();
}

cudaError_t tile_product(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b) {
  tile_product_kernel<<<1, 32>>>(c, a, b);
  return launched();
}

cudaError_t dynamic_shared(float* out, int bytes, int limit) {
  const cudaError_t e = cudaFuncSetAttribute(dynamic_shared_kernel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e != cudaSuccess) return e;
  dynamic_shared_kernel<<<1, 64, bytes>>>(out);
  return launched();
}

cudaError_t early_exit(float* out, int threads) {
  early_exit_kernel<<<1, threads>>>(out);
  return launched();
}

}  // namespace dscore::emulation_test
