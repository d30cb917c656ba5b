// The host-memory side of a model runner's CPU backend (gpt's and llama's
// cpu_backend.h add the kernels): buffers in host memory (counted by the
// host when there is one), parameters used in place when the host lends
// fp32 and converted otherwise (16-bit views, or T = double in the gradient
// checks), and gradient accumulators likewise. Where the bf16 GEMM is
// available (gemm_bf16.h), bf16 parameter views stay reachable beside their
// fp32 copies (bf16_view_of), so the linear layers multiply by the views.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "../moe/expert_group.h"
#include "../sequence_parallel.h"
#include "../tensor_parallel.h"
#include "attention.h"
#include "attention_bf16.h"
#include "gemm_bf16.h"
#include "linear.h"
#include "linear_bf16.h"
#include "parallel.h"
#include "vocab_parallel.h"

namespace dscore::transformer::cpu {

// Activation memory: counted in the instance's host context under `tag`
// (the engine's memory report shows e.g. "gpt activations"); with no host
// attached (tests that drive the runner directly) HostRef uses the C
// allocator. `model` and `tag` are string literals.
template <typename X>
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(sdk::HostRef host, int64_t n, const char* model, const char* tag)
      : data_(allocate(host, n, model, tag), Free{host}), size_(n) {}
  X* get() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  static X* allocate(const sdk::HostRef& host, int64_t n, const char* model, const char* tag) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(X);
    void* p = host.alloc(bytes, 64, DSCORE_MEMORY_HOST, tag);
    if (p == nullptr && bytes > 0)
      throw sdk::Error(DSCORE_RESOURCE_EXHAUSTED,
                       std::string(model) + ": out of host memory allocating " +
                           std::to_string(bytes >> 20) +
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

// What a CPU backend of a model runner provides besides its kernels:
// buffers, tokens, and an acquired layer's parameters and gradients.
template <typename T>
class HostBackend {
 public:
  using Scalar = T;
  using Stat = T;
  // Buffers and views are host memory: host-side math (MoE routing) may
  // read and write them.
  static constexpr bool kHostMemory = true;
  template <typename X>
  using Buffer = HostBuffer<X>;

  HostBackend(sdk::HostRef host, const char* model, const char* activation_tag)
      : host_(host),
        model_(model),
        tag_(activation_tag),
        group_(host, model),
        sequence_(host, model),
        expert_(host, model) {}

  // ---- tensor parallelism (the runners' split paths): the group's sum,
  // and the LM head over this rank's vocabulary rows [v0, v0 + rows) of V
  // (vocab_parallel.h).
  void tensor_parallel_sum(T* data, int64_t n) { group_.sum(data, n); }
  double vocab_parallel_head(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                             int64_t N, int64_t C, int64_t rows, int64_t v0, int64_t V,
                             double grad_scale) {
    const GroupReductions<T> reductions{[this](double* d, int64_t n) { group_.max(d, n); },
                                        [this](double* d, int64_t n) { group_.sum(d, n); },
                                        [this](T* d, int64_t n) { group_.sum(d, n); }};
    return vocab_parallel_lm_head(dx, dw, x, w, targets, N, C, rows, v0, V, grad_scale, reductions);
  }

  // ---- sequence parallelism (sequence_parallel.h): packed rows between
  // this rank's tokens and this rank's heads.
  void sequence_to_heads(const T* tokens, T* heads, int64_t B, const SequenceSlice& s, int64_t W,
                         int64_t parts) {
    sequence_.to_heads(tokens, heads, B, s, W, parts);
  }
  void sequence_to_tokens(const T* heads, T* tokens, int64_t B, const SequenceSlice& s, int64_t W,
                          int64_t parts) {
    sequence_.to_tokens(heads, tokens, B, s, W, parts);
  }

  // ---- expert parallelism (moe/expert_group.h): the expert group's
  // all-to-alls for an MoE layer's token exchange.
  moe::ExpertParallelGroup& expert_parallel() { return expert_; }

  template <typename X>
  Buffer<X> alloc(int64_t n) const {
    return Buffer<X>(host_, n, model_, tag_);
  }
  void zero(T* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * sizeof(T)); }
  void copy_tokens(int32_t* dst, const int32_t* host, int64_t n) {
    std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(int32_t));
  }
  // A pipeline stage's boundary tensors, to and from host memory.
  void copy_from_host(T* dst, const T* host, int64_t n) {
    std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(T));
  }
  void copy_to_host(T* host, const T* src, int64_t n) {
    std::memcpy(host, src, static_cast<size_t>(n) * sizeof(T));
  }

  // An acquired layer's parameters as T*: the views themselves when they
  // are CPU fp32 and T is float, else converted copies. Not copyable: while
  // it lives, its bf16 views are registered with the backend. A linear's
  // weight (gemm_weights, layer_pass.h) with a bf16 view on the bf16 GEMM is
  // only ever multiplied by that view (bf16_view_of), so its copy is not
  // converted: it stands for the view and must not be read (under ASan it
  // is poisoned, so a read fails). Converting them had cost 3-5% of a bf16
  // GPT step and 4-10% of the ~100M Llama's (bench/README.md).
  class Params {
   public:
    Params(const HostBackend& backend, const dscore_layer_views& views,
           const std::vector<int64_t>& numels, const std::vector<bool>* gemm_weights = nullptr)
        : backend_(backend) {
      try {
        load(views, numels, gemm_weights);
      } catch (...) {
        release();
        throw;
      }
    }
    Params(const Params&) = delete;
    Params& operator=(const Params&) = delete;
    ~Params() { release(); }
    const T* operator[](size_t i) const { return ptrs_[i]; }

   private:
    void release() {
      auto& views = backend_.bf16_views_;
      for (const auto& copy : copies_)
        views.erase(std::remove_if(views.begin(), views.end(),
                                   [&](const auto& v) { return v.first == copy.get(); }),
                    views.end());
      for (const auto& [p, n] : unconverted_) unpoison(p, n);
      unconverted_.clear();
      backend_.give_back(copies_);
    }
    void load(const dscore_layer_views& views, const std::vector<int64_t>& numels,
              const std::vector<bool>* gemm_weights) {
      const HostBackend& backend = backend_;
      for (size_t i = 0; i < numels.size(); ++i) {
        const dscore_tensor* t = views.params[i];
        backend.check_tensor(t, numels[i], "parameter");
        if (usable_in_place(t)) {
          ptrs_.push_back(static_cast<const T*>(t->data));
          continue;
        }
        copies_.push_back(backend.take_copy(numels[i]));
        T* dst = copies_.back().get();
        const bool bf16_view = std::is_same_v<T, float> && bf16_operands_for(t->dtype);
        if (bf16_view && gemm_weights != nullptr && i < gemm_weights->size() &&
            (*gemm_weights)[i]) {
          poison(dst, numels[i]);
          unconverted_.emplace_back(dst, numels[i]);
        } else {
          convert(dst, t, numels[i]);
        }
        ptrs_.push_back(dst);
        if (bf16_view) backend.bf16_views_.emplace_back(dst, static_cast<const uint16_t*>(t->data));
      }
    }

    // bf16 (the views of bf16 runs) in a loop the compiler vectorizes, over
    // TBB blocks (a layer's acquire waits for it); other dtypes element by
    // element.
    static void convert(T* dst, const dscore_tensor* t, int64_t n) {
      if (t->dtype == DSCORE_DTYPE_BF16) {
        const uint16_t* src = static_cast<const uint16_t*>(t->data);
        for_blocks(n, kElementBlock * 4, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) dst[k] = static_cast<T>(sdk::bf16_to_float(src[k]));
        });
        return;
      }
      for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<T>(sdk::load_float(t, k));
    }

    static void poison([[maybe_unused]] T* p, [[maybe_unused]] int64_t n) {
#if defined(__SANITIZE_ADDRESS__)
      ASAN_POISON_MEMORY_REGION(p, static_cast<size_t>(n) * sizeof(T));
#endif
    }
    static void unpoison([[maybe_unused]] T* p, [[maybe_unused]] int64_t n) {
#if defined(__SANITIZE_ADDRESS__)
      ASAN_UNPOISON_MEMORY_REGION(p, static_cast<size_t>(n) * sizeof(T));
#endif
    }

    const HostBackend& backend_;
    std::vector<const T*> ptrs_;
    std::vector<Buffer<T>> copies_;
    std::vector<std::pair<T*, int64_t>> unconverted_;
  };

  // Gradient accumulators for an acquired layer: the views themselves when
  // usable in place, else zeroed copies that commit() adds into the views.
  // A linear's weight (gemm_weights) multiplied by its bf16 view has its
  // copy lent unzeroed instead (lend_unwritten_gradient, linear_bf16.h):
  // its weight-gradient product overwrites it.
  class Grads {
   public:
    Grads(const HostBackend& backend, const dscore_layer_views& views,
          const std::vector<int64_t>& numels, const std::vector<bool>* gemm_weights)
        : backend_(backend), views_(views) {
      for (size_t i = 0; i < numels.size(); ++i) {
        dscore_tensor* t = views.grads[i];
        backend.check_tensor(t, numels[i], "gradient");
        if (usable_in_place(t)) {
          ptrs_.push_back(static_cast<T*>(t->data));
          copy_index_.push_back(-1);
          continue;
        }
        copy_index_.push_back(static_cast<int>(copies_.size()));
        copies_.push_back(backend.take_copy(numels[i]));
        T* copy = copies_.back().get();
        ptrs_.push_back(copy);
        if constexpr (std::is_same_v<T, float>) {
          if (gemm_weights != nullptr && i < gemm_weights->size() && (*gemm_weights)[i] &&
              views.params[i] != nullptr && bf16_operands_for(views.params[i]->dtype)) {
            lend_unwritten_gradient(copy, numels[i]);
            lent_.push_back(copy);
            continue;
          }
        }
        std::memset(copy, 0, static_cast<size_t>(numels[i]) * sizeof(T));
      }
    }
    Grads(const Grads&) = delete;
    Grads& operator=(const Grads&) = delete;
    ~Grads() {
      end_lent();
      backend_.give_back(copies_);
    }
    T* operator[](size_t i) const { return ptrs_[i]; }
    void commit() {
      for (size_t i = 0; i < ptrs_.size(); ++i) {
        if (copy_index_[i] < 0) continue;
        if (never_written(ptrs_[i])) continue;  // no gradient to add
        const dscore_tensor* t = views_.grads[i];
        const T* src = copies_[static_cast<size_t>(copy_index_[i])].get();
        if constexpr (std::is_same_v<T, float>) {
          if (t->dtype == DSCORE_DTYPE_BF16) {  // the same rounding, vectorised
            add_to_bf16(static_cast<uint16_t*>(t->data), src, t->numel);
            continue;
          }
        }
        for (int64_t k = 0; k < t->numel; ++k)
          sdk::store_float(t, k, sdk::load_float(t, k) + static_cast<float>(src[k]));
      }
    }

   private:
    // Whether p was lent unwritten and never written; it is not lent after.
    static bool never_written(T* p) {
      if constexpr (std::is_same_v<T, float>) return end_unwritten_gradient(p);
      return false;
    }
    void end_lent() {
      if constexpr (std::is_same_v<T, float>)
        for (T* p : lent_) end_unwritten_gradient(p);
      lent_.clear();
    }

    const HostBackend& backend_;
    const dscore_layer_views& views_;
    std::vector<T*> ptrs_;
    std::vector<int> copy_index_;
    std::vector<Buffer<T>> copies_;
    std::vector<T*> lent_;  // lend_unwritten_gradient's
  };

  // The bf16 parameter view whose fp32 copy `param` is, for a parameter of
  // an acquired layer (live Params) where the bf16 GEMM is available;
  // nullptr otherwise (fp32 views, fp16, or no bf16 GEMM here).
  const uint16_t* bf16_view_of(const T* param) const {
    for (const auto& [copy, view] : bf16_views_)
      if (copy == param) return view;
    return nullptr;
  }

  // Whether the acquired layer computes in bf16: its parameters are bf16
  // views and the bf16 GEMM is available. Its linears and LM head multiply
  // by the views, and its attention uses bf16 products (attention_bf16.h).
  bool bf16_compute() const { return !bf16_views_.empty(); }

  // nn.Linear (linear.h), on the bf16 GEMM when the weight is a bf16 view
  // (bf16_view_of; linear_bf16.h), else in T.
  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int64_t N, int64_t C,
                      int64_t OC) {
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w16 = bf16_view_of(w)) {
        matmul_forward_bf16(out, inp, w16, b, N, C, OC);
        return;
      }
    }
    cpu::matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int64_t N,
                       int64_t C, int64_t OC, bool accumulate_dinp = false) {
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w16 = bf16_view_of(w)) {
        matmul_backward_bf16(dinp, dw, db, dout, inp, w16, N, C, OC, accumulate_dinp);
        return;
      }
    }
    cpu::matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC, accumulate_dinp);
  }

  // A linear whose input is an operand buffer: one a kernel wrote in the
  // form this linear reads, bf16 values (in the buffer's first half) when
  // its weight is a bf16 view (bf16_operand_for), else T. The producer
  // rounds as it writes, so no pass reads fp32 values back to round them.
  bool bf16_operand_for(const T* w) const {
    if constexpr (std::is_same_v<T, float>) return bf16_view_of(w) != nullptr;
    return false;
  }
  void matmul_forward_operand(T* out, const T* inp, const T* w, const T* b, int64_t N, int64_t C,
                              int64_t OC) {
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w16 = bf16_view_of(w)) {
        matmul_forward_bf16(out, Bf16Operand{nullptr, reinterpret_cast<const uint16_t*>(inp)}, w16,
                            b, N, C, OC);
        return;
      }
    }
    cpu::matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward_operand(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                               int64_t N, int64_t C, int64_t OC, bool accumulate_dinp = false) {
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w16 = bf16_view_of(w)) {
        matmul_backward_bf16(dinp, dw, db, Bf16Operand{dout, nullptr},
                             Bf16Operand{nullptr, reinterpret_cast<const uint16_t*>(inp)}, w16, N,
                             C, OC, accumulate_dinp);
        return;
      }
    }
    cpu::matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC, accumulate_dinp);
  }

  // The same with the output gradient an operand buffer too (its producer
  // summed any bias gradient as it made it).
  void matmul_backward_operands(T* dinp, T* dw, const T* dout, const T* inp, const T* w, int64_t N,
                                int64_t C, int64_t OC, bool accumulate_dinp = false) {
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w16 = bf16_view_of(w)) {
        matmul_backward_bf16(dinp, dw, nullptr,
                             Bf16Operand{nullptr, reinterpret_cast<const uint16_t*>(dout)},
                             Bf16Operand{nullptr, reinterpret_cast<const uint16_t*>(inp)}, w16, N,
                             C, OC, accumulate_dinp);
        return;
      }
    }
    cpu::matmul_backward(dinp, dw, static_cast<T*>(nullptr), dout, inp, w, N, C, OC,
                         accumulate_dinp);
  }

  // Causal attention (attention.h), with bf16 products in a bf16 layer
  // (bf16_compute; attention_bf16.h).
  void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                         const AttentionShape& shape) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_compute()) return attention_forward_bf16(out, lse, q, k, v, shape);
    }
    cpu::attention_forward(out, lse, q, k, v, shape);
  }
  void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                          const T* out, const T* lse, const AttentionShape& shape) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_compute())
        return attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, shape);
    }
    cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, shape);
  }

  // The LM head with cross-entropy (linear.h), its products on the bf16
  // GEMM when the weight is a bf16 view.
  double lm_head_forward_backward(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                                  int64_t N, int64_t C, int64_t V, double grad_scale) {
    return cpu::lm_head_forward_backward(dx, dw, x, w, targets, N, C, V, grad_scale,
                                         bf16_view_of(w));
  }

  Params load_params(const dscore_layer_views& v, const std::vector<int64_t>& numels,
                     const std::vector<bool>* gemm_weights = nullptr) {
    return Params(*this, v, numels, gemm_weights);
  }
  // The host's work is done when it returns: nothing to wait for.
  void finish_reads(const Params&) {}
  Grads grads(const dscore_layer_views& v, const std::vector<int64_t>& numels,
              const std::vector<bool>* gemm_weights = nullptr) {
    return Grads(*this, v, numels, gemm_weights);
  }

 private:
  // A buffer of at least n elements for a Params or Grads copy: the
  // smallest spare one that fits, else a new one. Released copies come back
  // through give_back, so a layer's acquire reuses the last one's memory:
  // allocating them afresh had the kernel zero new pages on every acquire
  // (half of a bf16 step's page faults).
  Buffer<T> take_copy(int64_t n) const {
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (it->size() >= n && (best == spare_.end() || it->size() < best->size())) best = it;
    if (best == spare_.end()) return alloc<T>(n);
    Buffer<T> buffer = std::move(*best);
    spare_.erase(best);
    return buffer;
  }
  void give_back(std::vector<Buffer<T>>& copies) const {
    for (Buffer<T>& b : copies) spare_.push_back(std::move(b));
    copies.clear();
  }

  sdk::HostRef host_;
  const char* model_;
  const char* tag_;
  TensorParallelGroup group_;
  SequenceParallelGroup sequence_;
  moe::ExpertParallelGroup expert_;
  mutable std::vector<Buffer<T>> spare_;  // released copies (take_copy)
  // (fp32 copy, bf16 view) of the live Params' bf16 parameters.
  mutable std::vector<std::pair<const T*, const uint16_t*>> bf16_views_;
  // fp32 views for T = float; fp64 views (the gradient checks) for T = double.
  static constexpr dscore_dtype kOwnDtype =
      std::is_same_v<T, float> ? DSCORE_DTYPE_F32 : DSCORE_DTYPE_F64;
  static bool usable_in_place(const dscore_tensor* t) { return t->dtype == kOwnDtype; }
  void check_tensor(const dscore_tensor* t, int64_t numel, const char* what) const {
    if (t == nullptr || t->data == nullptr)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       std::string(model_) + ": a " + what + " view is NULL");
    if (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       std::string(model_) + ": a " + what +
                           " view is not in host memory (the CPU backend reads host views)");
    if (t->dtype != kOwnDtype && t->dtype != DSCORE_DTYPE_F32 && t->dtype != DSCORE_DTYPE_BF16 &&
        t->dtype != DSCORE_DTYPE_F16)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string(model_) + ": a " + what + " view is " +
                                                    sdk::dtype_name(t->dtype) +
                                                    "; expected fp32, bf16 or fp16");
    if (t->numel != numel || t->strides != nullptr)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, std::string(model_) + ": a " + what + " view has " +
                                                    std::to_string(t->numel) +
                                                    " elements, expected " + std::to_string(numel) +
                                                    " (dense)");
  }
};

}  // namespace dscore::transformer::cpu
