// The tied LM head of the CUDA backend (cuda_backend.h): logits = x wte^T
// in chunks of rows (about 128 MiB of fp32 logits at a time, so the N x V
// logits never all exist), cross-entropy and its gradient by one kernel per
// chunk, then dx = dlogits wte and dwte += dlogits^T x. Per-row losses stay
// on the device and come back once per call (pinned), summed on the host in
// row order.
// The logits and their gradient have a row pitch of V rounded up to 64
// elements, so every row starts at least 128-byte aligned and cuBLAS may
// take its aligned kernels whatever V is (with GPT-2's 50257, bf16 rows
// would be only 2-byte aligned); the padding is never read.
#include <algorithm>
#include <type_traits>

#include "cuda_backend.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"

namespace dscore::gpt::gpu {
namespace {

using transformer::cuda_memory::logits_pitch;
using transformer::cuda_memory::logits_rows_per_chunk;

double sum_in_order(const double* v, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += v[i];
  return sum;
}

// Enqueues the download of the (N) per-row losses into pinned host memory
// (one host wait for the stream, not two as a pageable copy makes), which
// holds them once the stream is synchronised.
const double* download_row_loss(CudaContext& context, const double* row_loss, int64_t N) {
  const size_t bytes = static_cast<size_t>(N) * sizeof(double);
  auto* host = static_cast<double*>(context.pinned(Pinned::kRowLoss, bytes));
  DSCORE_GPT_CUDA_CHECK(
      cudaMemcpyAsync(host, row_loss, bytes, cudaMemcpyDeviceToHost, context.stream()));
  return host;
}

}  // namespace

template <typename S>
double CudaBackend<S>::lm_head_forward_backward(S* dx, S* dwte, const S* x, const S* wte,
                                                const int32_t* targets, int64_t N, int64_t C,
                                                int64_t V, double grad_scale) {
  constexpr bool kFloat = std::is_same_v<S, float>;
  const cudaStream_t stream = context_->stream();
  const int64_t rb = logits_rows_per_chunk(N, V), ld = logits_pitch(V);
  auto* logits = static_cast<float*>(
      context_->scratch(Scratch::kLogits, static_cast<size_t>(rb * ld) * sizeof(float)));
  // fp32: the gradient overwrites the logits in place, and wte's gradient
  // accumulates straight into dwte. bf16: both get their own buffers, and
  // wte's gradient sums over the chunks in fp32, rounded into dwte once.
  S* dlogits = nullptr;
  float* dwte_sum = nullptr;
  if constexpr (kFloat) {
    dlogits = logits;
    dwte_sum = dwte;
  } else {
    dlogits = static_cast<S*>(
        context_->scratch(Scratch::kLogitGrads, static_cast<size_t>(rb * ld) * sizeof(S)));
    dwte_sum = static_cast<float*>(
        context_->scratch(Scratch::kHeadWeightGrad, static_cast<size_t>(V * C) * sizeof(float)));
  }
  auto* row_loss = static_cast<double*>(
      context_->scratch(Scratch::kRowLoss, static_cast<size_t>(N) * sizeof(double)));
  for (int64_t r0 = 0; r0 < N; r0 += rb) {
    const int64_t rows = std::min(rb, N - r0);
    // logits (rows, V) = x wte^T: cuBLAS (V x rows) = wte (op T) x^T.
    gemm(*context_, Op::kT, Op::kN, V, rows, C, 1.0f, wte, C, x + r0 * C, C, 0.0f, logits, ld);
    DSCORE_GPT_CUDA_CHECK(cross_entropy(dlogits, row_loss + r0, logits, targets + r0, rows, V, ld,
                                        static_cast<float>(grad_scale), stream));
    // dx (rows, C) = dlogits wte: cuBLAS (C x rows) = wte^T dlogits^T.
    gemm(*context_, Op::kN, Op::kN, C, rows, V, 1.0f, wte, C, dlogits, ld, 0.0f, dx + r0 * C, C);
    // dwte (V, C) += dlogits^T x: cuBLAS (C x V) = x^T dlogits (op T).
    const float beta = kFloat || r0 > 0 ? 1.0f : 0.0f;
    gemm(*context_, Op::kN, Op::kT, C, V, rows, 1.0f, x + r0 * C, C, dlogits, ld, beta, dwte_sum,
         C);
  }
  if constexpr (!kFloat) DSCORE_GPT_CUDA_CHECK(add_float(dwte, dwte_sum, V * C, stream));
  const double* host_loss = download_row_loss(*context_, row_loss, N);
  context_->synchronize();
  return sum_in_order(host_loss, N);
}

template <typename S>
double CudaBackend<S>::lm_head_forward(const S* x, const S* wte, const int32_t* targets, int64_t N,
                                       int64_t C, int64_t V, const int64_t* rows, int64_t n_rows,
                                       float* logits_host) {
  const cudaStream_t stream = context_->stream();
  const int64_t rb = logits_rows_per_chunk(N, V), ld = logits_pitch(V);
  auto* logits = static_cast<float*>(
      context_->scratch(Scratch::kLogits, static_cast<size_t>(rb * ld) * sizeof(float)));
  const double* host_loss = nullptr;  // the per-row losses, with targets
  if (targets != nullptr) {
    auto* row_loss = static_cast<double*>(
        context_->scratch(Scratch::kRowLoss, static_cast<size_t>(N) * sizeof(double)));
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
      const int64_t count = std::min(rb, N - r0);
      gemm(*context_, Op::kT, Op::kN, V, count, C, 1.0f, wte, C, x + r0 * C, C, 0.0f, logits, ld);
      DSCORE_GPT_CUDA_CHECK(cross_entropy<S>(nullptr, row_loss + r0, logits, targets + r0, count, V,
                                             ld, 0.0f, stream));
    }
    host_loss = download_row_loss(*context_, row_loss, N);
  }
  if (logits_host != nullptr && n_rows > 0) {
    // The wanted rows of x gathered into (count, C), their logits, downloaded.
    auto* gathered = static_cast<S*>(context_->scratch(
        Scratch::kGatheredRows, static_cast<size_t>(std::min(rb, n_rows) * C) * sizeof(S)));
    for (int64_t i0 = 0; i0 < n_rows; i0 += rb) {
      const int64_t count = std::min(rb, n_rows - i0);
      for (int64_t i = 0; i < count; ++i)
        DSCORE_GPT_CUDA_CHECK(cudaMemcpyAsync(gathered + i * C, x + rows[i0 + i] * C,
                                              static_cast<size_t>(C) * sizeof(S),
                                              cudaMemcpyDeviceToDevice, stream));
      gemm(*context_, Op::kT, Op::kN, V, count, C, 1.0f, wte, C, gathered, C, 0.0f, logits, ld);
      // Each row's V logits, without the pitch's padding.
      DSCORE_GPT_CUDA_CHECK(cudaMemcpy2DAsync(
          logits_host + i0 * V, static_cast<size_t>(V) * sizeof(float), logits,
          static_cast<size_t>(ld) * sizeof(float), static_cast<size_t>(V) * sizeof(float),
          static_cast<size_t>(count), cudaMemcpyDeviceToHost, stream));
    }
  }
  context_->synchronize();
  return host_loss != nullptr ? sum_in_order(host_loss, N) : 0.0;
}

#define DSCORE_GPT_INSTANTIATE(S)                                                              \
  template double CudaBackend<S>::lm_head_forward_backward(                                    \
      S*, S*, const S*, const S*, const int32_t*, int64_t, int64_t, int64_t, double);          \
  template double CudaBackend<S>::lm_head_forward(const S*, const S*, const int32_t*, int64_t, \
                                                  int64_t, int64_t, const int64_t*, int64_t,   \
                                                  float*);
DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::gpu
