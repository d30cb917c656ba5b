// Qwen's additions to the llama's attention (LlamaConfig::
// extra_attention_params), the parameters a block holds after its MLP:
// Qwen3's q_norm and k_norm, an RMSNorm over head_dim of each head's query
// and key between the projections and RoPE, and Qwen2's q, k and v biases.
// Written once over the runner's backend (runner.h); CPU only, without
// tensor or sequence parallelism (llama_config.cc refuses the rest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "llama_config.h"
#include "llama_params.h"

namespace dscore::llama {

template <class Backend>
class QwenAttention {
 public:
  using T = typename Backend::Scalar;
  using S = typename Backend::Stat;

  QwenAttention(const LlamaConfig& config, const LlamaParams& params, Backend& backend)
      : cfg_(config), backend_(backend) {
    for (int64_t l = 0; l < config.num_hidden_layers; ++l)
      first_extra_.push_back(params.layer_numels(static_cast<size_t>(l + 1)).size() -
                             static_cast<size_t>(config.extra_attention_params()));
  }

  // Qwen2's q (0), k (1) and v (2) biases of block l and their gradients;
  // null for the other architectures.
  template <class P>
  const T* bias(int64_t l, const P& p, int i) const {
    return cfg_.qkv_bias() ? p[extra(l, i)] : nullptr;
  }
  template <class G>
  T* bias_grad(int64_t l, G& g, int i) const {
    return cfg_.qkv_bias() ? g[extra(l, i)] : nullptr;
  }

  // Qwen3: q = q_norm(q_pre) per head, k = k_norm(k_pre), over N tokens;
  // rstd: (N, NH + NKV), the query heads' then the key/value heads'.
  template <class P>
  void norm_forward(int64_t l, const P& p, int64_t N, const T* q_pre, const T* k_pre, T* q, T* k,
                    S* rstd) {
    const int64_t NH = cfg_.local_heads(), hd = cfg_.head_dim;
    backend_.rmsnorm_forward(q, rstd, q_pre, p[extra(l, 0)], N * NH, hd, cfg_.rms_norm_eps);
    backend_.rmsnorm_forward(k, rstd + N * NH, k_pre, p[extra(l, 1)], N * cfg_.local_kv_heads(), hd,
                             cfg_.rms_norm_eps);
  }
  // From the gradients at q and k to those at q_pre and k_pre
  // (overwritten), adding q_norm's and k_norm's.
  template <class P, class G>
  void norm_backward(int64_t l, const P& p, G& g, int64_t N, const T* dq, const T* dk,
                     const T* q_pre, const T* k_pre, const S* rstd, T* dq_pre, T* dk_pre) {
    const int64_t NH = cfg_.local_heads(), NKV = cfg_.local_kv_heads(), hd = cfg_.head_dim;
    backend_.zero(dq_pre, N * NH * hd);
    backend_.zero(dk_pre, N * NKV * hd);
    backend_.rmsnorm_backward(dq_pre, g[extra(l, 0)], dq, q_pre, p[extra(l, 0)], rstd, N * NH, hd);
    backend_.rmsnorm_backward(dk_pre, g[extra(l, 1)], dk, k_pre, p[extra(l, 1)], rstd + N * NH,
                              N * NKV, hd);
  }

 private:
  // Block l's i-th parameter after its MLP.
  size_t extra(int64_t l, int i) const {
    return first_extra_[static_cast<size_t>(l)] + static_cast<size_t>(i);
  }

  const LlamaConfig& cfg_;
  Backend& backend_;
  std::vector<size_t> first_extra_;  // per block
};

}  // namespace dscore::llama
