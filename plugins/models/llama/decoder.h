// The llama's KV-cached generation (model.h decode) over a host-memory
// backend: each decode() call runs only the new tokens of its sequences
// through the layers, as packed rows (N = their sum), appending their keys
// and values (after RoPE at their positions, after Qwen3's q/k norms) to
// the cache, attending over the cache (transformer_common/cpu/
// cached_attention.h), and computing the head at each sequence's last new
// token. The block is the runner's (runner.h) unfused form: the same
// kernels, fp32 activations, bf16 products where the views are bf16. MoE
// blocks route each token as the runner does (dropless, so a token's route
// does not depend on the others of the batch). Under tensor parallelism
// (dense blocks) each rank holds its heads' keys and values and its part of
// every linear, as the runner splits them: the group sums the embedding,
// o_proj's and down_proj's outputs, and the head's logits over each rank's
// vocabulary rows.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/model.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "../transformer_common/cpu/cached_attention.h"
#include "../transformer_common/kv_cache.h"
#include "../transformer_common/layer_pass.h"
#include "../transformer_common/tensor_parallel.h"
#include "llama_config.h"
#include "llama_params.h"
#include "moe_mlp.h"
#include "qwen_attention.h"
#include "rope.h"

namespace dscore::llama {

template <class Backend>
class LlamaDecoder {
 public:
  using T = typename Backend::Scalar;
  using S = typename Backend::Stat;
  using Cache = transformer::KvCache<Backend>;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;

  LlamaDecoder(const LlamaConfig& config, const LlamaParams& params, Backend& backend)
      : cfg_(config),
        backend_(backend),
        vocab_first_(params.vocab_first()),
        vocab_rows_(params.vocab_rows()),
        inv_freq_(rope_inv_freq(config)),
        qwen_(cfg_, params, backend),
        moe_(cfg_, backend) {
    for (size_t l = 0; l < static_cast<size_t>(config.layer_count()); ++l)
      numels_.push_back(params.layer_numels(l));
  }

  std::unique_ptr<sdk::DecodeCache> make_cache(int64_t slots, int64_t max_positions) {
    if (split() && cfg_.has_moe())
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "llama: KV-cached generation of MoE blocks under tensor parallelism is not "
                       "supported; generate on one rank");
    transformer::check_cache_request(max_positions, cfg_.block_size,
                                     cfg_.sp_size > 1 || cfg_.ep_size > 1, "llama");
    if (max_positions > table_positions_) {
      rope_cos_ = backend_.template alloc<T>(max_positions * (cfg_.head_dim / 2));
      rope_sin_ = backend_.template alloc<T>(max_positions * (cfg_.head_dim / 2));
      backend_.rope_tables(rope_cos_.get(), rope_sin_.get(), inv_freq_, max_positions);
      table_positions_ = max_positions;
    }
    return std::make_unique<Cache>(backend_, cfg_.num_hidden_layers, slots, max_positions,
                                   cfg_.local_kv_dim());
  }

  // logits: (count, vocab_size) host fp32.
  void decode(Cache& cache, const transformer::DecodeRows& rows, const dscore_model_hooks& hooks,
              float* logits) {
    allocate(rows.rows(), rows.count());
    const int64_t N = rows.rows(), C = cfg_.hidden_size;
    backend_.copy_tokens(tokens_.get(), rows.tokens.data(), N);
    transformer::forward_layer(hooks, 0, numels_[0], backend_, [&](const auto& p) {
      if (!split()) {
        backend_.embedding_forward(x_.get(), tokens_.get(), p[kEmbedTokens], N, C);
      } else if constexpr (requires {
                             backend_.embedding_forward_part(nullptr, nullptr, p[kEmbedTokens], 0,
                                                             0, 0, 0);
                           }) {
        backend_.embedding_forward_part(x_.get(), tokens_.get(), p[kEmbedTokens], N, C,
                                        vocab_first_, vocab_rows_);
        group_sum(x_.get(), N * C);
      }
    });
    if (cfg_.has_moe()) {
      moe_.allocate(N, 0, cfg_.num_hidden_layers);
      moe_.begin_pass(rows.tokens);
    }
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      // The linears' weights only through their 16-bit views: no fp32
      // copies of them (layer_pass.h).
      transformer::forward_layer(
          hooks, static_cast<size_t>(l + 1), numels_[l + 1], backend_,
          [&](const auto& p) { block(l, p, cache, rows); }, &block_gemm_weights(cfg_.moe_block(l)));
    }
    // The final norm and the head at each sequence's last new token.
    for (const transformer::DecodeSequence& s : rows.sequences)
      backend_.copy_from_host(last_.get() + (&s - rows.sequences.data()) * C,
                              x_.get() + s.last_row() * C, C);
    const int64_t count = rows.count();
    std::vector<int64_t> head_rows(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) head_rows[static_cast<size_t>(i)] = i;
    const auto head = [&](const T* w) {
      if (!split())
        return (void)backend_.lm_head_forward(lnf_.get(), w, nullptr, count, C, cfg_.vocab_size,
                                              head_rows.data(), count, logits);
      std::vector<float> local(static_cast<size_t>(count * vocab_rows_));
      backend_.lm_head_forward(lnf_.get(), w, nullptr, count, C, vocab_rows_, head_rows.data(),
                               count, local.data());
      transformer::gather_vocab_logits(backend_, local.data(), count, vocab_rows_, vocab_first_,
                                       cfg_.vocab_size, logits, "llama");
    };
    const size_t final_layer = static_cast<size_t>(cfg_.final_layer());
    transformer::forward_layer(
        hooks, final_layer, numels_[final_layer], backend_, [&](const auto& p) {
          backend_.rmsnorm_forward(lnf_.get(), rstd_.get(), last_.get(), p[kFinalNorm], count, C,
                                   cfg_.rms_norm_eps);
          if (!cfg_.tie_word_embeddings) head(p[kLmHead]);
        });
    if (cfg_.tie_word_embeddings)
      transformer::forward_layer(hooks, 0, numels_[0], backend_,
                                 [&](const auto& p) { head(p[kEmbedTokens]); });
  }

 private:
  // Block l over the rows in x_, its output back in x_.
  template <class P>
  void block(int64_t l, const P& p, Cache& cache, const transformer::DecodeRows& rows) {
    // This rank's heads and units (all of them without tensor parallelism).
    const int64_t N = rows.rows(), C = cfg_.hidden_size, I = cfg_.local_intermediate();
    const int64_t Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim(), hd = cfg_.head_dim;
    const double eps = cfg_.rms_norm_eps;
    T* x = x_.get();
    backend_.rmsnorm_forward(ln_.get(), rstd_.get(), x, p[kInputNorm], N, C, eps);
    T* q_proj = cfg_.qk_norm() ? q_pre_.get() : q_.get();
    T* k_proj = cfg_.qk_norm() ? k_pre_.get() : k_.get();
    backend_.matmul_forward(q_proj, ln_.get(), p[kQProj], qwen_.bias(l, p, 0), N, C, Q);
    backend_.matmul_forward(k_proj, ln_.get(), p[kKProj], qwen_.bias(l, p, 1), N, C, KV);
    backend_.matmul_forward(v_.get(), ln_.get(), p[kVProj], qwen_.bias(l, p, 2), N, C, KV);
    if (cfg_.qk_norm())
      qwen_.norm_forward(l, p, N, q_pre_.get(), k_pre_.get(), q_.get(), k_.get(), head_rstd_.get());
    std::vector<transformer::cpu::CachedRows<T>> attention;
    for (const transformer::DecodeSequence& s : rows.sequences) {
      const int64_t table = s.position * (hd / 2);
      T* q = q_.get() + s.first_row * Q;
      T* k = k_.get() + s.first_row * KV;
      backend_.rope_forward(q, rope_cos_.get() + table, rope_sin_.get() + table, 1, s.length,
                            cfg_.local_heads(), hd, Q);
      backend_.rope_forward(k, rope_cos_.get() + table, rope_sin_.get() + table, 1, s.length,
                            cfg_.local_kv_heads(), hd, KV);
      T* keys = cache.keys(l, s.slot);
      T* values = cache.values(l, s.slot);
      backend_.copy_from_host(keys + s.position * KV, k, s.length * KV);
      backend_.copy_from_host(values + s.position * KV, v_.get() + s.first_row * KV, s.length * KV);
      attention.push_back({q, atty_.get() + s.first_row * Q, keys, values, s.position, s.length});
    }
    transformer::cpu::cached_attention(attention,
                                       {cfg_.local_heads(), cfg_.local_kv_heads(), hd, Q, KV, Q});
    backend_.matmul_forward(o_.get(), atty_.get(), p[kOProj], nullptr, N, Q, C);
    group_sum(o_.get(), N * C);
    backend_.add(x2_.get(), x, o_.get(), N * C);
    if (cfg_.moe_block(l)) {
      if constexpr (requires { Backend::kHostMemory; }) {
        backend_.rmsnorm_forward(moe_.input(l), rstd_.get(), x2_.get(), p[kPostAttentionNorm], N, C,
                                 eps);
        moe_.forward(l, p, x, /*recompute=*/false);
      }
    } else {
      backend_.rmsnorm_forward(ln_.get(), rstd_.get(), x2_.get(), p[kPostAttentionNorm], N, C, eps);
      backend_.matmul_forward(gate_.get(), ln_.get(), p[kGateProj], nullptr, N, C, I);
      backend_.matmul_forward(up_.get(), ln_.get(), p[kUpProj], nullptr, N, C, I);
      backend_.swiglu_forward(act_.get(), gate_.get(), up_.get(), N * I);
      backend_.matmul_forward(x, act_.get(), p[kDownProj], nullptr, N, I, C);
      group_sum(x, N * C);
    }
    backend_.add(x, x, x2_.get(), N * C);
  }

  // Buffers for N rows of `count` sequences, grown when a call needs more.
  void allocate(int64_t N, int64_t count) {
    if (N > rows_) {
      const int64_t C = cfg_.hidden_size, Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim();
      const int64_t I = cfg_.local_intermediate();
      tokens_ = backend_.template alloc<int32_t>(N);
      x_ = alloc(N * C), x2_ = alloc(N * C), ln_ = alloc(N * C), o_ = alloc(N * C);
      rstd_ = backend_.template alloc<S>(N);
      q_ = alloc(N * Q), k_ = alloc(N * KV), v_ = alloc(N * KV), atty_ = alloc(N * Q);
      if (cfg_.qk_norm()) {
        q_pre_ = alloc(N * Q), k_pre_ = alloc(N * KV);
        head_rstd_ = backend_.template alloc<S>(N * (cfg_.local_heads() + cfg_.local_kv_heads()));
      }
      gate_ = alloc(N * I), up_ = alloc(N * I), act_ = alloc(N * I);
      rows_ = N;
    }
    if (count > sequences_) {
      last_ = alloc(count * cfg_.hidden_size), lnf_ = alloc(count * cfg_.hidden_size);
      sequences_ = count;
    }
  }
  Buffer<T> alloc(int64_t n) { return backend_.template alloc<T>(n); }
  // Tensor parallelism (llama_params.cc's split): the group's sum in place.
  bool split() const { return cfg_.tp_size > 1; }
  void group_sum(T* data, int64_t n) {
    if (split()) transformer::group_sum(backend_, data, n, "llama");
  }

  const LlamaConfig& cfg_;
  Backend& backend_;
  int64_t vocab_first_, vocab_rows_;  // this rank's rows of the embedding and head
  std::vector<double> inv_freq_;
  std::vector<std::vector<int64_t>> numels_;
  QwenAttention<Backend> qwen_;
  LlamaMoe<Backend> moe_;
  Buffer<T> rope_cos_, rope_sin_;
  int64_t table_positions_ = 0;
  int64_t rows_ = 0, sequences_ = 0;  // what the buffers hold
  Buffer<int32_t> tokens_;
  Buffer<T> x_, x2_, ln_, o_, q_, k_, v_, atty_, q_pre_, k_pre_, gate_, up_, act_, last_, lnf_;
  Buffer<S> rstd_, head_rstd_;
};

}  // namespace dscore::llama
