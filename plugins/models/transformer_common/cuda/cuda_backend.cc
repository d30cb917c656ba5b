// CudaBackend (cuda_backend.h): parameter upload, gradient download, and the
// embedding, LayerNorm, matmul and elementwise steps. Attention and the LM
// head are in cuda_attention.cc and cuda_lm_head.cc.
#include "cuda_backend.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <type_traits>

#include "cuda_gemm.h"
#include "cuda_kernels.h"

namespace dscore::gpt::gpu {
namespace {

// Views the CUDA backend reads: dense, fp32/bf16/fp16, in host memory
// (uploaded) or in device memory of the GPU it computes on (used in place).
void check_view(const dscore_tensor* t, int64_t numel, const char* what) {
  if (t == nullptr || t->data == nullptr)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string("gpt: a ") + what + " view is NULL");
  if (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST &&
      t->device_type != DSCORE_DEVICE_CUDA)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string("gpt: a ") + what +
                         " view is neither host nor CUDA device memory (DLPack device type " +
                         std::to_string(t->device_type) + ")");
  if (t->dtype != DSCORE_DTYPE_F32 && t->dtype != DSCORE_DTYPE_BF16 && t->dtype != DSCORE_DTYPE_F16)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string("gpt: a ") + what + " view is " +
                                                  sdk::dtype_name(t->dtype) +
                                                  "; expected fp32, bf16 or fp16");
  if (t->numel != numel || t->strides != nullptr)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     std::string("gpt: a ") + what + " view has " + std::to_string(t->numel) +
                         " elements, expected " + std::to_string(numel) + " (dense)");
}

template <typename S>
constexpr dscore_dtype kStorageDtype =
    std::is_same_v<S, float> ? DSCORE_DTYPE_F32 : DSCORE_DTYPE_BF16;

HostType host_type(dscore_dtype dtype) {
  return dtype == DSCORE_DTYPE_F32    ? HostType::kF32
         : dtype == DSCORE_DTYPE_BF16 ? HostType::kBf16
                                      : HostType::kF16;
}

template <typename S>
float host_float(const S* p, int64_t i) {
  if constexpr (std::is_same_v<S, float>)
    return p[i];
  else
    return sdk::bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
}

// view += src, element by element (each element on its own: any split of
// the work gives the same result).
template <typename S>
void add_into_view(dscore_tensor* view, const S* src) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, view->numel, int64_t{1} << 16),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      if (view->dtype == DSCORE_DTYPE_F32) {
                        float* dst = static_cast<float*>(view->data);
                        for (int64_t i = r.begin(); i < r.end(); ++i) dst[i] += host_float(src, i);
                        return;
                      }
                      for (int64_t i = r.begin(); i < r.end(); ++i)
                        sdk::store_float(view, i, sdk::load_float(view, i) + host_float(src, i));
                    });
}

}  // namespace

template <typename S>
CudaParams<S>::CudaParams(CudaContext& context, const dscore_layer_views& views,
                          const std::vector<int64_t>& numels) {
  buffers_.reserve(numels.size());
  bool reads_queued = false;  // a copy or conversion still reading a view
  bool reads_host = false;    // ... a view in host memory
  for (size_t i = 0; i < numels.size(); ++i) {
    const dscore_tensor* t = views.params[i];
    check_view(t, numels[i], "parameter");
    if (t->device_type == DSCORE_DEVICE_CUDA && t->dtype == kStorageDtype<S>) {
      pointers_.push_back(static_cast<const S*>(t->data));  // in place: no copy
      continue;
    }
    buffers_.emplace_back(context, numels[i], "parameters");
    reads_queued = true;
    S* dst = buffers_.back().get();
    pointers_.push_back(dst);
    const size_t bytes = static_cast<size_t>(numels[i]) * sdk::dtype_size(t->dtype);
    if (t->device_type == DSCORE_DEVICE_CUDA) {  // another dtype: converted on the device
      DSCORE_GPT_CUDA_CHECK(
          convert(dst, t->data, host_type(t->dtype), numels[i], context.stream()));
      continue;
    }
    reads_host = true;
    if (t->dtype == kStorageDtype<S>) {
      DSCORE_GPT_CUDA_CHECK(
          cudaMemcpyAsync(dst, t->data, bytes, cudaMemcpyHostToDevice, context.stream()));
      continue;
    }
    void* staging = context.scratch(Scratch::kParamStaging, bytes);
    DSCORE_GPT_CUDA_CHECK(
        cudaMemcpyAsync(staging, t->data, bytes, cudaMemcpyHostToDevice, context.stream()));
    DSCORE_GPT_CUDA_CHECK(convert(dst, staging, host_type(t->dtype), numels[i], context.stream()));
  }
  // Copies and conversions read their views asynchronously: wait, so the
  // layer may be released (on the host's stream only for host views: the
  // host orders its device work after the stream, not its own writes).
  // Views used in place are waited for by finish_reads instead.
  if (reads_host || (reads_queued && !context.host_orders())) context.synchronize();
}

template <typename S>
CudaGrads<S>::CudaGrads(CudaContext& context, const dscore_layer_views& views,
                        const std::vector<int64_t>& numels)
    : context_(&context), views_(&views) {
  buffers_.reserve(numels.size());
  for (size_t i = 0; i < numels.size(); ++i) {
    check_view(views.grads[i], numels[i], "gradient");
    buffers_.emplace_back(context, numels[i], "gradients");
    DSCORE_GPT_CUDA_CHECK(cudaMemsetAsync(
        buffers_.back().get(), 0, static_cast<size_t>(numels[i]) * sizeof(S), context.stream()));
  }
}

template <typename S>
void CudaGrads<S>::commit() {
  // Views in device memory: added there, in the host path's arithmetic.
  bool on_host = false;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    dscore_tensor* view = views_->grads[i];
    if (view->device_type != DSCORE_DEVICE_CUDA) {
      on_host = true;
      continue;
    }
    DSCORE_GPT_CUDA_CHECK(add_into(view->data, host_type(view->dtype), buffers_[i].get(),
                                   buffers_[i].size(), context_->stream()));
  }
  if (!on_host) {
    // The engine reduces the views once commit returns: after the stream's
    // work when it is the host's, else after this wait.
    if (!context_->host_orders()) context_->synchronize();
    return;
  }
  size_t total = 0;
  for (const DeviceBuffer<S>& b : buffers_) total += static_cast<size_t>(b.size()) * sizeof(S);
  auto* staging = static_cast<unsigned char*>(context_->pinned(Pinned::kGradients, total));
  size_t offset = 0;
  for (const DeviceBuffer<S>& b : buffers_) {
    const size_t bytes = static_cast<size_t>(b.size()) * sizeof(S);
    DSCORE_GPT_CUDA_CHECK(cudaMemcpyAsync(staging + offset, b.get(), bytes, cudaMemcpyDeviceToHost,
                                          context_->stream()));
    offset += bytes;
  }
  context_->synchronize();
  offset = 0;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (views_->grads[i]->device_type != DSCORE_DEVICE_CUDA)
      add_into_view(views_->grads[i], reinterpret_cast<const S*>(staging + offset));
    offset += static_cast<size_t>(buffers_[i].size()) * sizeof(S);
  }
}

template <typename S>
CudaBackend<S>::CudaBackend()
    : context_(std::make_unique<CudaContext>()),
      fused_attention_(transformer::runs_fused_attention(std::is_same_v<S, __nv_bfloat16>)) {}

template <typename S>
void CudaBackend<S>::zero(S* p, int64_t n) {
  DSCORE_GPT_CUDA_CHECK(
      cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(S), context_->stream()));
}

template <typename S>
void CudaBackend<S>::copy_tokens(int32_t* dst, const int32_t* host, int64_t n) {
  context_->make_current();
  context_->upload(dst, host, static_cast<size_t>(n) * sizeof(int32_t));
  context_->remember_tokens(dst, host, n);
}

template <typename S>
void CudaBackend<S>::encoder_forward(S* out, const int32_t* tok, const S* wte, const S* wpe,
                                     int64_t B, int64_t Tn, int64_t C) {
  DSCORE_GPT_CUDA_CHECK(gpu::encoder_forward(out, tok, wte, wpe, B, Tn, C, context_->stream()));
}

template <typename S>
void CudaBackend<S>::encoder_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tok,
                                      int64_t B, int64_t Tn, int64_t C) {
  DSCORE_GPT_CUDA_CHECK(encoder_dwpe(dwpe, dout, B, Tn, C, context_->stream()));
  embedding_backward(dwte, dout, tok, B * Tn, C);
}

template <typename S>
void CudaBackend<S>::embedding_backward(S* dwte, const S* dout, const int32_t* tok, int64_t N,
                                        int64_t C) {
  // The index [token | start | rows]: rows grouped by token (padding embeds
  // token 0), each group in increasing row order.
  const std::vector<int32_t>& tokens = context_->host_tokens(tok);
  std::vector<int32_t> rows(static_cast<size_t>(N));
  std::iota(rows.begin(), rows.end(), 0);
  auto token_of = [&](int32_t r) { return std::max<int32_t>(tokens[static_cast<size_t>(r)], 0); };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](int32_t a, int32_t b) { return token_of(a) < token_of(b); });
  std::vector<int32_t> bucket_token, bucket_start;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t token = token_of(rows[static_cast<size_t>(i)]);
    if (bucket_token.empty() || bucket_token.back() != token) {
      bucket_token.push_back(token);
      bucket_start.push_back(static_cast<int32_t>(i));
    }
  }
  bucket_start.push_back(static_cast<int32_t>(N));
  embedding_index_ = bucket_token;
  embedding_index_.insert(embedding_index_.end(), bucket_start.begin(), bucket_start.end());
  embedding_index_.insert(embedding_index_.end(), rows.begin(), rows.end());
  const size_t bytes = embedding_index_.size() * sizeof(int32_t);
  auto* index = static_cast<int32_t*>(context_->scratch(Scratch::kEmbeddingIndex, bytes));
  context_->upload(index, embedding_index_.data(), bytes);
  DSCORE_GPT_CUDA_CHECK(encoder_dwte(dwte, dout, index, static_cast<int64_t>(bucket_token.size()),
                                     C, context_->stream()));
}

template <typename S>
void CudaBackend<S>::layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* w,
                                       const S* b, int64_t N, int64_t C) {
  DSCORE_GPT_CUDA_CHECK(
      gpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C, context_->stream()));
}

template <typename S>
void CudaBackend<S>::layernorm_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp,
                                        const S* w, const float* mean, const float* rstd, int64_t N,
                                        int64_t C) {
  DSCORE_GPT_CUDA_CHECK(
      layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C, context_->stream()));
  auto* partials = static_cast<float*>(context_->scratch(
      Scratch::kColumnPartials, static_cast<size_t>(column_sum_partials(N, C)) * sizeof(float)));
  DSCORE_GPT_CUDA_CHECK(
      column_sums(db, dw, dout, inp, mean, rstd, N, C, partials, context_->stream()));
}

// out (N, OC) = inp (N, C) w (OC, C)^T + b: cuBLAS's (OC x N) = w^T-as-stored
// (op T) times inp (op N), onto the bias rows (beta 1: one rounding).
template <typename S>
void CudaBackend<S>::matmul_forward(S* out, const S* inp, const S* w, const S* b, int64_t N,
                                    int64_t C, int64_t OC) {
  if (b != nullptr) DSCORE_GPT_CUDA_CHECK(broadcast_rows(out, b, N, OC, context_->stream()));
  gemm(*context_, Op::kT, Op::kN, OC, N, C, 1.0f, w, C, inp, C, b != nullptr ? 1.0f : 0.0f, out,
       OC);
}

// dinp (N, C) = dout w; dw (OC, C) += dout^T inp; db (OC) += column sums of dout.
template <typename S>
void CudaBackend<S>::matmul_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w,
                                     int64_t N, int64_t C, int64_t OC) {
  gemm(*context_, Op::kN, Op::kN, C, N, OC, 1.0f, w, C, dout, OC, 0.0f, dinp, C);
  gemm(*context_, Op::kN, Op::kT, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C);
  if (db == nullptr) return;
  auto* partials = static_cast<float*>(context_->scratch(
      Scratch::kColumnPartials, static_cast<size_t>(column_sum_partials(N, OC)) * sizeof(float)));
  DSCORE_GPT_CUDA_CHECK(column_sums<S>(db, nullptr, dout, nullptr, nullptr, nullptr, N, OC,
                                       partials, context_->stream()));
}

template <typename S>
void CudaBackend<S>::gelu_forward(S* out, const S* inp, int64_t n) {
  DSCORE_GPT_CUDA_CHECK(gpu::gelu_forward(out, inp, n, context_->stream()));
}

template <typename S>
void CudaBackend<S>::gelu_backward(S* dinp, const S* inp, const S* dout, int64_t n) {
  DSCORE_GPT_CUDA_CHECK(gpu::gelu_backward(dinp, inp, dout, n, context_->stream()));
}

template <typename S>
void CudaBackend<S>::add(S* out, const S* a, const S* b, int64_t n) {
  DSCORE_GPT_CUDA_CHECK(gpu::add(out, a, b, n, context_->stream()));
}

template class CudaParams<float>;
template class CudaParams<__nv_bfloat16>;
template class CudaGrads<float>;
template class CudaGrads<__nv_bfloat16>;
template class CudaBackend<float>;
template class CudaBackend<__nv_bfloat16>;

}  // namespace dscore::gpt::gpu
