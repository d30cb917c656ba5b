// The CPU backend of the GPT runner (runner.h lists what a backend
// provides): buffers in host memory (counted by the host when there is one),
// parameters used in place when the host lends fp32 and converted otherwise
// (16-bit views, or T = double in the gradient checks), and the kernels of
// kernels.h.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels.h"

namespace dscore::gpt::cpu {

// Activation memory: counted in the instance's host context (the engine's
// memory report shows it as "gpt activations"); with no host attached
// (tests that drive the runner directly) HostRef uses the C allocator.
template <typename X>
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(sdk::HostRef host, int64_t n) : data_(allocate(host, n), Free{host}), size_(n) {}
  X* get() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  static X* allocate(const sdk::HostRef& host, int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(X);
    void* p = host.alloc(bytes, 64, DSCORE_MEMORY_HOST, "gpt activations");
    if (p == nullptr && bytes > 0)
      throw sdk::Error(DSCORE_RESOURCE_EXHAUSTED,
                       "gpt: out of host memory allocating " + std::to_string(bytes >> 20) +
                           " MiB of activations; lower train_micro_batch_size_per_gpu or "
                           "block_size, or enable activation_checkpointing");
    return static_cast<X*>(p);
  }
  struct Free {
    sdk::HostRef host;
    void operator()(X* p) const { host.free(p, DSCORE_MEMORY_HOST); }
  };
  std::unique_ptr<X, Free> data_;
  int64_t size_ = 0;
};

template <typename T>
class CpuBackend {
 public:
  using Scalar = T;
  using Stat = T;
  template <typename X>
  using Buffer = HostBuffer<X>;

  explicit CpuBackend(sdk::HostRef host = {}) : host_(host) {}

  template <typename X>
  Buffer<X> alloc(int64_t n) {
    return Buffer<X>(host_, n);
  }
  void zero(T* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * sizeof(T)); }
  void copy_tokens(int32_t* dst, const int32_t* host, int64_t n) {
    std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(int32_t));
  }

  // An acquired layer's parameters as T*: the views themselves when they
  // are CPU fp32 and T is float, else converted copies.
  class Params {
   public:
    Params(sdk::HostRef host, const dscore_layer_views& views, const std::vector<int64_t>& numels) {
      for (size_t i = 0; i < numels.size(); ++i) {
        const dscore_tensor* t = views.params[i];
        check_tensor(t, numels[i], "parameter");
        if (usable_in_place(t)) {
          ptrs_.push_back(static_cast<const T*>(t->data));
          continue;
        }
        copies_.emplace_back(host, numels[i]);
        T* dst = copies_.back().get();
        for (int64_t k = 0; k < numels[i]; ++k) dst[k] = static_cast<T>(sdk::load_float(t, k));
        ptrs_.push_back(dst);
      }
    }
    const T* operator[](size_t i) const { return ptrs_[i]; }

   private:
    std::vector<const T*> ptrs_;
    std::vector<Buffer<T>> copies_;
  };

  // Gradient accumulators for an acquired layer: the views themselves when
  // usable in place, else zeroed copies that commit() adds into the views.
  class Grads {
   public:
    Grads(sdk::HostRef host, const dscore_layer_views& views, const std::vector<int64_t>& numels)
        : views_(views) {
      for (size_t i = 0; i < numels.size(); ++i) {
        dscore_tensor* t = views.grads[i];
        check_tensor(t, numels[i], "gradient");
        if (usable_in_place(t)) {
          ptrs_.push_back(static_cast<T*>(t->data));
          copy_index_.push_back(-1);
          continue;
        }
        copy_index_.push_back(static_cast<int>(copies_.size()));
        copies_.emplace_back(host, numels[i]);
        std::memset(copies_.back().get(), 0, static_cast<size_t>(numels[i]) * sizeof(T));
        ptrs_.push_back(copies_.back().get());
      }
    }
    T* operator[](size_t i) const { return ptrs_[i]; }
    void commit() {
      for (size_t i = 0; i < ptrs_.size(); ++i) {
        if (copy_index_[i] < 0) continue;
        const dscore_tensor* t = views_.grads[i];
        const T* src = copies_[static_cast<size_t>(copy_index_[i])].get();
        for (int64_t k = 0; k < t->numel; ++k)
          sdk::store_float(t, k, sdk::load_float(t, k) + static_cast<float>(src[k]));
      }
    }

   private:
    const dscore_layer_views& views_;
    std::vector<T*> ptrs_;
    std::vector<int> copy_index_;
    std::vector<Buffer<T>> copies_;
  };

  Params load_params(const dscore_layer_views& v, const std::vector<int64_t>& numels) {
    return Params(host_, v, numels);
  }
  Grads grads(const dscore_layer_views& v, const std::vector<int64_t>& numels) {
    return Grads(host_, v, numels);
  }

  void encoder_forward(T* out, const int32_t* tok, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C) {
    cpu::encoder_forward(out, tok, wte, wpe, B, Tn, C);
  }
  void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tok, int64_t B, int64_t Tn,
                        int64_t C) {
    cpu::encoder_backward(dwte, dwpe, dout, tok, B, Tn, C);
  }
  void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N,
                         int64_t C) {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                          const T* mean, const T* rstd, int64_t N, int64_t C) {
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int64_t N, int64_t C,
                      int64_t OC) {
    cpu::matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int64_t N,
                       int64_t C, int64_t OC) {
    cpu::matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  }
  // The tiled kernels of attention.h: the state is each row's logsumexp.
  int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) const {
    return cpu::attention_state_elements(B, Tn, NH);
  }
  void attention_forward(T* out, T* state, const T* qkv, int64_t B, int64_t Tn, int64_t C,
                         int64_t NH) {
    cpu::attention_forward(out, state, qkv, B, Tn, C, NH);
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* state,
                          int64_t B, int64_t Tn, int64_t C, int64_t NH) {
    cpu::attention_backward(dqkv, dout, qkv, out, state, B, Tn, C, NH);
  }
  void gelu_forward(T* out, const T* inp, int64_t n) { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void add(T* out, const T* a, const T* b, int64_t n) { cpu::add(out, a, b, n); }
  double lm_head_forward_backward(T* dx, T* dwte, const T* x, const T* wte, const int32_t* targets,
                                  int64_t N, int64_t C, int64_t V, double grad_scale) {
    return cpu::lm_head_forward_backward(dx, dwte, x, wte, targets, N, C, V, grad_scale);
  }
  double lm_head_forward(const T* x, const T* wte, const int32_t* targets, int64_t N, int64_t C,
                         int64_t V, const int64_t* rows, int64_t n_rows, float* logits_host) {
    return cpu::lm_head_forward(x, wte, targets, N, C, V, rows, n_rows, logits_host);
  }

 private:
  sdk::HostRef host_;
  // fp32 views for T = float; fp64 views (the gradient checks) for T = double.
  static constexpr dscore_dtype kOwnDtype =
      std::is_same_v<T, float> ? DSCORE_DTYPE_F32 : DSCORE_DTYPE_F64;
  static bool usable_in_place(const dscore_tensor* t) { return t->dtype == kOwnDtype; }
  static void check_tensor(const dscore_tensor* t, int64_t numel, const char* what) {
    if (t == nullptr || t->data == nullptr)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string("gpt: a ") + what + " view is NULL");
    if (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       std::string("gpt: a ") + what +
                           " view is not in host memory (the CPU backend reads host views)");
    if (t->dtype != kOwnDtype && t->dtype != DSCORE_DTYPE_F32 && t->dtype != DSCORE_DTYPE_BF16 &&
        t->dtype != DSCORE_DTYPE_F16)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string("gpt: a ") + what + " view is " +
                                                    sdk::dtype_name(t->dtype) +
                                                    "; expected fp32, bf16 or fp16");
    if (t->numel != numel || t->strides != nullptr)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       std::string("gpt: a ") + what + " view has " + std::to_string(t->numel) +
                           " elements, expected " + std::to_string(numel) + " (dense)");
  }
};

}  // namespace dscore::gpt::cpu
