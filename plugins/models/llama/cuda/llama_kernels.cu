// The llama model's CUDA kernels (llama_cuda_kernels.h): RMSNorm, rotary
// embeddings and SwiGLU, forward and backward, fp32 arithmetic on S
// storage.
#include "../../transformer_common/cuda/device_math.cuh"
#include "llama_cuda_kernels.h"

namespace dscore::llama::gpu {

using namespace transformer::gpu;  // NOLINT: the shared device helpers

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row

template <typename S>
__global__ void rmsnorm_forward_kernel(S* out, float* rstd, const S* inp, const S* weight,
                                       int64_t N, int64_t C, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* x = inp + row * C;
  float sum_sq = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = to_float(x[c]);
    sum_sq += v * v;
  }
  const float s = 1.0f / sqrtf(warp_sum(sum_sq) / static_cast<float>(C) + eps);
  S* o = out + row * C;
  for (int64_t c = lane; c < C; c += 32)
    o[c] = from_float<S>(to_float(weight[c]) * (to_float(x[c]) * s));
  if (lane == 0) rstd[row] = s;
}

template <typename S>
__global__ void rmsnorm_backward_input_kernel(S* dinp, const S* dout, const S* inp, const S* weight,
                                              const float* rstd, int64_t N, int64_t C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* x = inp + row * C;
  const S* d = dout + row * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int64_t c = lane; c < C; c += 32)
    dot += to_float(weight[c]) * to_float(d[c]) * (to_float(x[c]) * s);
  dot = warp_sum(dot) / static_cast<float>(C);
  S* dx = dinp + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = to_float(x[c]) * s;
    dx[c] =
        from_float<S>(to_float(dx[c]) + s * (to_float(weight[c]) * to_float(d[c]) - xhat * dot));
  }
}

template <typename S>
__global__ void rmsnorm_backward_weight_kernel(S* dweight, const S* dout, const S* inp,
                                               const float* rstd, int64_t N, int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < N; ++r)
    sum += to_float(dout[r * C + c]) * to_float(inp[r * C + c]) * rstd[r];
  dweight[c] = from_float<S>(to_float(dweight[c]) + sum);
}

template <typename S>
__global__ void embedding_forward_kernel(S* out, const int32_t* tokens, const S* embed, int64_t N,
                                         int64_t C) {
  const int64_t n = N * C, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t r = k / C;
    const int32_t token = tokens[r] < 0 ? 0 : tokens[r];
    out[k] = embed[token * C + k % C];
  }
}

template <typename S>
__global__ void rope_kernel(S* x, const S* cos, const S* sin, int64_t rows, int64_t T,
                            int64_t heads, int64_t head_dim, int64_t ld, float sign) {
  const int64_t half = head_dim / 2, n = rows * heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t i = k % half, h = (k / half) % heads, r = k / (half * heads);
    const float c = to_float(cos[(r % T) * half + i]), s = sign * to_float(sin[(r % T) * half + i]);
    S* lo = x + r * ld + h * head_dim + i;
    S* hi = lo + half;
    const float a = to_float(*lo), b = to_float(*hi);
    *lo = from_float<S>(a * c - b * s);
    *hi = from_float<S>(b * c + a * s);
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename S>
__global__ void swiglu_forward_kernel(S* out, const S* gate, const S* up, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = to_float(gate[i]);
    out[i] = from_float<S>(g * sigmoid(g) * to_float(up[i]));
  }
}

template <typename S>
__global__ void swiglu_backward_kernel(S* dgate, S* dup, const S* dout, const S* gate, const S* up,
                                       int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = to_float(gate[i]), d = to_float(dout[i]), s = sigmoid(g);
    dup[i] = from_float<S>(d * g * s);
    dgate[i] = from_float<S>(d * to_float(up[i]) * s * (1.0f + g * (1.0f - s)));
  }
}

unsigned int row_blocks(int64_t N) {
  return static_cast<unsigned int>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

template <typename S>
cudaError_t embedding_forward(S* out, const int32_t* tokens, const S* embed, int64_t N, int64_t C,
                              cudaStream_t stream) {
  if (N * C <= 0) return launched();
  embedding_forward_kernel<<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(out, tokens, embed,
                                                                               N, C);
  return launched();
}

template <typename S>
cudaError_t rmsnorm_forward(S* out, float* rstd, const S* inp, const S* weight, int64_t N,
                            int64_t C, float eps, cudaStream_t stream) {
  if (N <= 0) return launched();
  rmsnorm_forward_kernel<<<row_blocks(N), kThreads, 0, stream>>>(out, rstd, inp, weight, N, C, eps);
  return launched();
}

template <typename S>
cudaError_t rmsnorm_backward_input(S* dinp, const S* dout, const S* inp, const S* weight,
                                   const float* rstd, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0) return launched();
  rmsnorm_backward_input_kernel<<<row_blocks(N), kThreads, 0, stream>>>(dinp, dout, inp, weight,
                                                                        rstd, N, C);
  return launched();
}

template <typename S>
cudaError_t rmsnorm_backward_weight(S* dweight, const S* dout, const S* inp, const float* rstd,
                                    int64_t N, int64_t C, cudaStream_t stream) {
  if (C <= 0) return launched();
  const unsigned int blocks = static_cast<unsigned int>((C + kThreads - 1) / kThreads);
  rmsnorm_backward_weight_kernel<<<blocks, kThreads, 0, stream>>>(dweight, dout, inp, rstd, N, C);
  return launched();
}

template <typename S>
cudaError_t rope(S* x, const S* cos, const S* sin, int64_t B, int64_t T, int64_t heads,
                 int64_t head_dim, int64_t ld, bool transpose, cudaStream_t stream) {
  const int64_t n = B * T * heads * (head_dim / 2);
  if (n <= 0) return launched();
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      x, cos, sin, B * T, T, heads, head_dim, ld, transpose ? -1.0f : 1.0f);
  return launched();
}

template <typename S>
cudaError_t swiglu_forward(S* out, const S* gate, const S* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return launched();
  swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, gate, up, n);
  return launched();
}

template <typename S>
cudaError_t swiglu_backward(S* dgate, S* dup, const S* dout, const S* gate, const S* up, int64_t n,
                            cudaStream_t stream) {
  if (n <= 0) return launched();
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up,
                                                                         n);
  return launched();
}

#define DSCORE_LLAMA_CUDA_INSTANTIATE(S)                                                           \
  template cudaError_t rmsnorm_forward<S>(S*, float*, const S*, const S*, int64_t, int64_t, float, \
                                          cudaStream_t);                                           \
  template cudaError_t rmsnorm_backward_input<S>(S*, const S*, const S*, const S*, const float*,   \
                                                 int64_t, int64_t, cudaStream_t);                  \
  template cudaError_t rmsnorm_backward_weight<S>(S*, const S*, const S*, const float*, int64_t,   \
                                                  int64_t, cudaStream_t);                          \
  template cudaError_t embedding_forward<S>(S*, const int32_t*, const S*, int64_t, int64_t,        \
                                            cudaStream_t);                                         \
  template cudaError_t rope<S>(S*, const S*, const S*, int64_t, int64_t, int64_t, int64_t,         \
                               int64_t, bool, cudaStream_t);                                       \
  template cudaError_t swiglu_forward<S>(S*, const S*, const S*, int64_t, cudaStream_t);           \
  template cudaError_t swiglu_backward<S>(S*, S*, const S*, const S*, const S*, int64_t,           \
                                          cudaStream_t);
DSCORE_LLAMA_CUDA_INSTANTIATE(float)
DSCORE_LLAMA_CUDA_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_LLAMA_CUDA_INSTANTIATE

}  // namespace dscore::llama::gpu
