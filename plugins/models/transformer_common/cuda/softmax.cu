// The GPT model's two softmaxes (cuda_kernels.h): the causal softmax of the
// attention scores, forward and backward (one warp per row), and the LM
// head's cross-entropy with its gradient (one block per row of V logits).
// Scores and logits arrive in fp32 from cuBLAS; reductions run in a fixed
// order, so results repeat exactly.
#include "cuda_kernels.h"
#include "device_math.cuh"

namespace dscore::gpt::gpu {

using namespace transformer::gpu;  // NOLINT: the shared device helpers

namespace {

constexpr int kRowThreads = 256;  // 8 rows (warps) per block
constexpr int kVocabThreads = 512;

template <typename S>
__global__ void causal_softmax_forward_kernel(S* att, const float* scores, int64_t rows, int T) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const float* z = scores + row * T;
  float mx = -INFINITY;
  for (int s = lane; s <= t; s += 32) mx = fmaxf(mx, z[s]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int s = lane; s <= t; s += 32) sum += expf(z[s] - mx);
  const float inv = 1.0f / warp_sum(sum);
  S* p = att + row * T;
  for (int s = lane; s < T; s += 32) p[s] = from_float<S>(s <= t ? expf(z[s] - mx) * inv : 0.0f);
}

template <typename S>
__global__ void causal_softmax_backward_kernel(S* ds, const S* att, const float* datt, int64_t rows,
                                               int T) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const S* p = att + row * T;
  const float* d = datt + row * T;
  float dot = 0.0f;
  for (int s = lane; s <= t; s += 32) dot += to_float(p[s]) * d[s];
  dot = warp_sum(dot);
  S* out = ds + row * T;
  for (int s = lane; s < T; s += 32)
    out[s] = from_float<S>(s <= t ? to_float(p[s]) * (d[s] - dot) : 0.0f);
}

// In place for S = float (dlogits == logits): the target logit is read
// before the first barrier, every other element by the thread that later
// overwrites it.
template <typename S>
__global__ void cross_entropy_kernel(S* dlogits, double* row_loss, const float* logits,
                                     const int32_t* targets, int64_t V, int64_t ld,
                                     float grad_scale) {
  __shared__ float scratch[32];
  __shared__ float target_logit;
  const int64_t row = blockIdx.x;
  const float* z = logits + row * ld;
  const int32_t y = targets[row];
  if (threadIdx.x == 0) target_logit = y >= 0 ? z[y] : 0.0f;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  sum = block_sum(sum, scratch);  // its barriers also publish target_logit
  if (threadIdx.x == 0 && row_loss != nullptr)
    row_loss[row] = y < 0 ? 0.0
                          : static_cast<double>(mx) + log(static_cast<double>(sum)) -
                                static_cast<double>(target_logit);
  if (dlogits == nullptr) return;
  S* d = dlogits + row * ld;
  const float inv = 1.0f / sum;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float g = y < 0 ? 0.0f : grad_scale * (expf(z[v] - mx) * inv - (v == y ? 1.0f : 0.0f));
    d[v] = from_float<S>(g);
  }
}

unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kRowThreads / 32 - 1) / (kRowThreads / 32));
}

}  // namespace

template <typename S>
cudaError_t causal_softmax_forward(S* att, const float* scores, int64_t rows, int64_t T,
                                   cudaStream_t stream) {
  if (rows <= 0) return launched();
  causal_softmax_forward_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(att, scores, rows,
                                                                              static_cast<int>(T));
  return launched();
}

template <typename S>
cudaError_t causal_softmax_backward(S* ds, const S* att, const float* datt, int64_t rows, int64_t T,
                                    cudaStream_t stream) {
  if (rows <= 0) return launched();
  causal_softmax_backward_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(ds, att, datt, rows,
                                                                               static_cast<int>(T));
  return launched();
}

template <typename S>
cudaError_t cross_entropy(S* dlogits, double* row_loss, const float* logits, const int32_t* targets,
                          int64_t rows, int64_t V, int64_t ld, float grad_scale,
                          cudaStream_t stream) {
  if (rows <= 0) return launched();
  cross_entropy_kernel<<<static_cast<unsigned int>(rows), kVocabThreads, 0, stream>>>(
      dlogits, row_loss, logits, targets, V, ld, grad_scale);
  return launched();
}

#define DSCORE_GPT_INSTANTIATE(S)                                                               \
  template cudaError_t causal_softmax_forward<S>(S*, const float*, int64_t, int64_t,            \
                                                 cudaStream_t);                                 \
  template cudaError_t causal_softmax_backward<S>(S*, const S*, const float*, int64_t, int64_t, \
                                                  cudaStream_t);                                \
  template cudaError_t cross_entropy<S>(S*, double*, const float*, const int32_t*, int64_t,     \
                                        int64_t, int64_t, float, cudaStream_t);

DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::gpu
