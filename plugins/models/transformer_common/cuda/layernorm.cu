// LayerNorm forward and backward for the GPT model (cuda_kernels.h), and the
// column sums that give LayerNorm's weight/bias gradients and a linear
// layer's bias gradient. One warp per row with fp32 statistics; column sums
// in two passes over fixed row chunks (partials, then their sum in chunk
// order), so every result is the same from run to run.
#include "cuda_kernels.h"
#include "device_math.cuh"

namespace dscore::gpt::gpu {

using namespace transformer::gpu;  // NOLINT: the shared device helpers

namespace {

constexpr int kRowThreads = 256;  // 8 rows (warps) per block
constexpr float kLayerNormEps = 1e-5f;

template <typename S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp,
                                         const S* weight, const S* bias, int64_t N, int C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // whole warps leave together
  const S* x = inp + row * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
  const float m = warp_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(x[c]) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / static_cast<float>(C) + kLayerNormEps);
  S* o = out + row * C;
  for (int c = lane; c < C; c += 32)
    o[c] = from_float<S>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename S>
__global__ void layernorm_backward_input_kernel(S* dinp, const S* dout, const S* inp,
                                                const S* weight, const float* mean,
                                                const float* rstd, int64_t N, int C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* x = inp + row * C;
  const S* d = dout + row * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = to_float(weight[c]) * to_float(d[c]);
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * (to_float(x[c]) - m) * s;
  }
  dnorm_mean = warp_sum(dnorm_mean) / static_cast<float>(C);
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / static_cast<float>(C);
  S* dx = dinp + row * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(weight[c]) * to_float(d[c]);
    dx[c] = from_float<S>(to_float(dx[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

constexpr int kColumnTile = 32;  // columns per block (one warp reads them)
constexpr int kRowLanes = 8;     // rows read in parallel per block

// Block (x: column tile, y: row chunk) writes partials[chunk] = [sum d | sum
// d * norm] over its rows for its 32 columns. Thread (tx, ty) reads rows ty,
// ty + 8, ...; the 8 lanes' sums are added in lane order.
template <typename S, bool kNorm>
__global__ void column_partials_kernel(float* partials, const S* dout, const S* inp,
                                       const float* mean, const float* rstd, int64_t N, int C,
                                       int64_t rows_per_chunk) {
  __shared__ float sums[kRowLanes][kColumnTile];
  __shared__ float norm_sums[kRowLanes][kColumnTile];
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float sum = 0.0f, norm_sum = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float d = to_float(dout[r * C + c]);
      sum += d;
      if (kNorm) norm_sum += d * (to_float(inp[r * C + c]) - mean[r]) * rstd[r];
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  norm_sums[threadIdx.y][threadIdx.x] = norm_sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float a = 0.0f, b = 0.0f;
  for (int k = 0; k < kRowLanes; ++k) {
    a += sums[k][threadIdx.x];
    b += norm_sums[k][threadIdx.x];
  }
  float* p = partials + static_cast<int64_t>(blockIdx.y) * 2 * C;
  p[c] = a;
  p[C + c] = b;
}

template <typename S>
__global__ void column_finish_kernel(S* dsum, S* dnorm, const float* partials, int64_t chunks,
                                     int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a = 0.0f, b = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    a += partials[k * 2 * C + c];
    b += partials[k * 2 * C + C + c];
  }
  dsum[c] = from_float<S>(to_float(dsum[c]) + a);
  if (dnorm != nullptr) dnorm[c] = from_float<S>(to_float(dnorm[c]) + b);
}

unsigned int row_blocks(int64_t N) {
  return static_cast<unsigned int>((N + kRowThreads / 32 - 1) / (kRowThreads / 32));
}

}  // namespace

template <typename S>
cudaError_t layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* weight,
                              const S* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return launched();
  layernorm_forward_kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(out, mean, rstd, inp, weight,
                                                                      bias, N, static_cast<int>(C));
  return launched();
}

template <typename S>
cudaError_t layernorm_backward_input(S* dinp, const S* dout, const S* inp, const S* weight,
                                     const float* mean, const float* rstd, int64_t N, int64_t C,
                                     cudaStream_t stream) {
  if (N <= 0 || C <= 0) return launched();
  layernorm_backward_input_kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, static_cast<int>(C));
  return launched();
}

template <typename S>
cudaError_t column_sums(S* dsum, S* dnorm, const S* dout, const S* inp, const float* mean,
                        const float* rstd, int64_t N, int64_t C, float* partials,
                        cudaStream_t stream) {
  if (N <= 0 || C <= 0) return launched();
  const int64_t rows = column_sum_rows_per_chunk(N);
  const int64_t chunks = (N + rows - 1) / rows;  // <= 512
  const dim3 grid(static_cast<unsigned int>((C + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned int>(chunks));
  const dim3 block(kColumnTile, kRowLanes);
  if (inp != nullptr)
    column_partials_kernel<S, true>
        <<<grid, block, 0, stream>>>(partials, dout, inp, mean, rstd, N, static_cast<int>(C), rows);
  else
    column_partials_kernel<S, false>
        <<<grid, block, 0, stream>>>(partials, dout, inp, mean, rstd, N, static_cast<int>(C), rows);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  column_finish_kernel<<<static_cast<unsigned int>((C + 255) / 256), 256, 0, stream>>>(
      dsum, dnorm, partials, chunks, static_cast<int>(C));
  return launched();
}

#define DSCORE_GPT_INSTANTIATE(S)                                                                  \
  template cudaError_t layernorm_forward<S>(S*, float*, float*, const S*, const S*, const S*,      \
                                            int64_t, int64_t, cudaStream_t);                       \
  template cudaError_t layernorm_backward_input<S>(S*, const S*, const S*, const S*, const float*, \
                                                   const float*, int64_t, int64_t, cudaStream_t);  \
  template cudaError_t column_sums<S>(S*, S*, const S*, const S*, const float*, const float*,      \
                                      int64_t, int64_t, float*, cudaStream_t);

DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::gpu
