// The CUDA backend of the GPT runner (runner.h lists what a backend
// provides), for S = float or __nv_bfloat16: activations and parameter
// copies in device memory as S, LayerNorm statistics and every accumulation
// in fp32. Parameters are uploaded from the host views at each acquire and
// converted to S on the device; gradients accumulate in device buffers and
// commit() adds them into the host views. Matmuls through cuBLAS
// (cuda_gemm.h), the rest through cuda_kernels.h. Deterministic: no float
// atomics anywhere, so a step repeats bit for bit on the same GPU.
#pragma once

#include <cuda_bf16.h>
#include <dscore/model.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "../pass_memory.h"
#include "cuda_context.h"
#include "flash_attention.h"

namespace dscore::gpt::gpu {

// An owning device array of n X, freed into the context's pool.
template <typename X>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(CudaContext& context, int64_t n, const char* what = "activations")
      : data_(static_cast<X*>(context.allocate(static_cast<size_t>(n) * sizeof(X), what)),
              Free{&context}),
        size_(n) {}
  X* get() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  struct Free {
    CudaContext* context = nullptr;
    void operator()(X* p) const {
      if (context != nullptr) context->release(p);
    }
  };
  std::unique_ptr<X, Free> data_;
  int64_t size_ = 0;
};

// An acquired layer's parameters on the device as S. Host views are
// uploaded (the constructor returns once they have been read, so the layer
// may be released); device views of type S are used in place, others
// converted on the device. In-place views must stay acquired while work
// that reads them is queued: the layer passes release after backward.
template <typename S>
class CudaParams {
 public:
  CudaParams(CudaContext& context, const dscore_layer_views& views,
             const std::vector<int64_t>& numels);
  const S* operator[](size_t i) const { return pointers_[i]; }
  // Whether some parameter is the view itself (queued work reads the view).
  bool borrowed() const { return buffers_.size() < pointers_.size(); }

 private:
  std::vector<DeviceBuffer<S>> buffers_;  // the copies
  std::vector<const S*> pointers_;        // per parameter: a copy or the view itself
};

// Zeroed device gradient accumulators for an acquired layer; commit() adds
// them into the gradient views (fp32, bf16 or fp16): on the device for views
// in device memory, downloaded for host views; it returns when the views are
// updated.
template <typename S>
class CudaGrads {
 public:
  CudaGrads(CudaContext& context, const dscore_layer_views& views,
            const std::vector<int64_t>& numels);
  S* operator[](size_t i) const { return buffers_[i].get(); }
  void commit();

 private:
  CudaContext* context_;
  const dscore_layer_views* views_;
  std::vector<DeviceBuffer<S>> buffers_;
};

// The attention a bf16 backend runs, from DSCORE_CUDA_ATTENTION ("fused",
// the default, or "unfused"; cuda_pass_memory.h). fp32 runs unfused always.
using transformer::attention_kernels_from_env;
using transformer::cuda_memory::AttentionKernels;

// The fused attention (flash_attention.h) on the context's stream, for the
// gpt and llama backends: `state` is the attention state, each query row's
// logsumexp as fp32. bf16 only (fp32 throws INTERNAL); a head size the
// kernels do not take throws INVALID_ARGUMENT with the fix.
template <typename S>
void fused_attention_forward(CudaContext& context, S* out, S* state, const S* q, const S* k,
                             const S* v, const transformer::gpu::FlashShape& shape);
template <typename S>
void fused_attention_backward(CudaContext& context, S* dq, S* dk, S* dv, const S* dout, const S* q,
                              const S* k, const S* v, const S* out, const S* state,
                              const transformer::gpu::FlashShape& shape);

template <typename S>
class CudaBackend {
 public:
  using Scalar = S;
  using Stat = float;
  template <typename X>
  using Buffer = DeviceBuffer<X>;
  using Params = CudaParams<S>;
  using Grads = CudaGrads<S>;

  CudaBackend();

  template <typename X>
  Buffer<X> alloc(int64_t n) {
    return Buffer<X>(*context_, n);
  }
  void zero(S* p, int64_t n);
  // The first backend call of every pass: also makes the device current.
  void copy_tokens(int32_t* dst, const int32_t* host, int64_t n);
  // gemm_weights (layer_pass.h) changes nothing here: parameters are used
  // on the device as the views lend them.
  Params load_params(const dscore_layer_views& v, const std::vector<int64_t>& numels,
                     const std::vector<bool>* /*gemm_weights*/ = nullptr) {
    return Params(*context_, v, numels);
  }
  // gemm_weights: read by the CPU backend only (HostBackend::Grads).
  Grads grads(const dscore_layer_views& v, const std::vector<int64_t>& numels,
              const std::vector<bool>* /*gemm_weights*/ = nullptr) {
    return Grads(*context_, v, numels);
  }
  // Before the layer is released: work still queued may read views used in
  // place, whose memory the engine frees or reuses after release (on the
  // host's stream, the host orders that after the work).
  void finish_reads(const Params& params) {
    if (params.borrowed() && !context_->host_orders()) context_->synchronize();
  }
  // Computes on the host's stream (model.h), nullptr: on its own.
  void use_stream(void* stream) { context_->use_stream(static_cast<cudaStream_t>(stream)); }
  // On the host's stream every use of a device view is work enqueued there
  // (load_params, the gradient adds), so views ready in its order will do.
  uint32_t view_flags() const {
    return context_->host_orders() ? uint32_t{DSCORE_VIEWS_STREAM_ORDERED} : 0u;
  }

  // The kernels of cpu/kernels.h and cpu/attention.h, same arguments and
  // accumulate/overwrite rules, device pointers.
  void encoder_forward(S* out, const int32_t* tok, const S* wte, const S* wpe, int64_t B,
                       int64_t Tn, int64_t C);
  void encoder_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tok, int64_t B, int64_t Tn,
                        int64_t C);
  // dwte[token] += the rows of dout (N, C) that embed it (the token part of
  // encoder_backward; also the llama model's embedding gradient).
  void embedding_backward(S* dwte, const S* dout, const int32_t* tok, int64_t N, int64_t C);
  void layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b,
                         int64_t N, int64_t C);
  void layernorm_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C);
  void matmul_forward(S* out, const S* inp, const S* w, const S* b, int64_t N, int64_t C,
                      int64_t OC);
  void matmul_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w, int64_t N,
                       int64_t C, int64_t OC);
  // Fused (bf16 unless DSCORE_CUDA_ATTENTION says otherwise): the state is
  // each query row's logsumexp, (B, NH, T) fp32 in the S buffer, and
  // backward reads out. Unfused: the softmax probabilities att (B, NH, T, T),
  // zero above the diagonal, and backward does not read out.
  bool fused_attention() const { return fused_attention_; }
  int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) const {
    return transformer::attention_state_rule(fused_attention_)(B, Tn, NH);
  }
  void attention_forward(S* out, S* att, const S* qkv, int64_t B, int64_t Tn, int64_t C,
                         int64_t NH);
  void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out, const S* att,
                          int64_t B, int64_t Tn, int64_t C, int64_t NH);
  void gelu_forward(S* out, const S* inp, int64_t n);
  void gelu_backward(S* dinp, const S* inp, const S* dout, int64_t n);
  void add(S* out, const S* a, const S* b, int64_t n);
  // Return the loss sum (one read-back per call); logits_host is host memory.
  double lm_head_forward_backward(S* dx, S* dwte, const S* x, const S* wte, const int32_t* targets,
                                  int64_t N, int64_t C, int64_t V, double grad_scale);
  double lm_head_forward(const S* x, const S* wte, const int32_t* targets, int64_t N, int64_t C,
                         int64_t V, const int64_t* rows, int64_t n_rows, float* logits_host);

  // Not used by the runner: wait for the enqueued work (tests, benchmarks).
  void synchronize() { context_->synchronize(); }
  CudaContext& context() { return *context_; }

 private:
  std::unique_ptr<CudaContext> context_;  // stable address: buffers point at it
  bool fused_attention_ = false;
  std::vector<int32_t> embedding_index_;  // host side of the encoder backward's index
};

extern template class CudaParams<float>;
extern template class CudaParams<__nv_bfloat16>;
extern template class CudaGrads<float>;
extern template class CudaGrads<__nv_bfloat16>;
extern template class CudaBackend<float>;
extern template class CudaBackend<__nv_bfloat16>;

}  // namespace dscore::gpt::gpu
