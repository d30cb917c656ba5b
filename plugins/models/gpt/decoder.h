// The gpt's KV-cached generation (model.h decode) over a host-memory
// backend: each decode() call runs only the new tokens of its sequences
// through the layers, as packed rows (N = their sum), their token and
// position embeddings at their positions, appending each block's keys and
// values to the cache, attending over the cache (transformer_common/cpu/
// cached_attention.h), and the tied head at each sequence's last new
// token. The block is the runner's (runner.h) unfused form: the same
// kernels, fp32 activations, bf16 products where the views are bf16. MoE
// blocks are refused: their capacity-limited routes depend on the whole
// window (the host then generates without the cache). Under tensor
// parallelism each rank holds its heads' keys and values and its part of
// every linear, as the runner splits them: the group sums the embedding
// (the first rank adds the positions), the attention projection's and the
// MLP's outputs (their replicated biases added by the first rank), and the
// head's logits over each rank's vocabulary rows.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/model.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "../transformer_common/cpu/cached_attention.h"
#include "../transformer_common/kv_cache.h"
#include "../transformer_common/layer_pass.h"
#include "../transformer_common/tensor_parallel.h"
#include "gpt_config.h"
#include "gpt_params.h"

namespace dscore::gpt {

template <class Backend>
class GptDecoder {
 public:
  using T = typename Backend::Scalar;
  using S = typename Backend::Stat;
  using Cache = transformer::KvCache<Backend>;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;

  GptDecoder(const GptConfig& config, const GptParams& params, Backend& backend)
      : cfg_(config),
        backend_(backend),
        vocab_first_(params.vocab_first()),
        vocab_rows_(params.vocab_rows()) {
    for (size_t l = 0; l < static_cast<size_t>(config.layer_count()); ++l)
      numels_.push_back(params.layer_numels(l));
  }

  std::unique_ptr<sdk::DecodeCache> make_cache(int64_t slots, int64_t max_positions) {
    if (cfg_.has_moe())
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "gpt: KV-cached generation of MoE layers is not supported (their "
                       "capacity-limited routes depend on the whole window)");
    transformer::check_cache_request(max_positions, cfg_.block_size, cfg_.sp_size > 1, "gpt");
    return std::make_unique<Cache>(backend_, cfg_.n_layer, slots, max_positions,
                                   cfg_.local_width());
  }

  // logits: (count, vocab_size) host fp32.
  void decode(Cache& cache, const transformer::DecodeRows& rows, const dscore_model_hooks& hooks,
              float* logits) {
    allocate(rows.rows(), rows.count());
    const int64_t N = rows.rows(), C = cfg_.n_embd;
    backend_.copy_tokens(tokens_.get(), rows.tokens.data(), N);
    for (int64_t l = 0; l < cfg_.n_layer; ++l) {
      if (l == 0) {  // the embeddings, each sequence's at its positions
        transformer::forward_layer(hooks, 0, numels_[0], backend_, [&](const auto& p) {
          for (const transformer::DecodeSequence& s : rows.sequences) {
            T* x = x_.get() + s.first_row * C;
            const int32_t* tokens = tokens_.get() + s.first_row;
            const T* positions = p[kWpe] + s.position * C;
            if (!split()) {
              backend_.encoder_forward(x, tokens, p[kWte], positions, 1, s.length, C);
            } else if constexpr (requires {
                                   backend_.encoder_forward_part(x, tokens, p[kWte], positions, 1,
                                                                 0, 0, 0, 0);
                                 }) {
              backend_.encoder_forward_part(x, tokens, p[kWte], first_part() ? positions : nullptr,
                                            1, s.length, C, vocab_first_, vocab_rows_);
            }
          }
          group_sum(x_.get(), N * C);
        });
      }
      // The linears' weights only through their 16-bit views: no fp32
      // copies of them (layer_pass.h).
      transformer::forward_layer(
          hooks, static_cast<size_t>(l + 1), numels_[l + 1], backend_,
          [&](const auto& p) { block(l, p, cache, rows); }, &block_gemm_weights(cfg_.moe_block(l)));
    }
    const int64_t count = rows.count();
    for (int64_t i = 0; i < count; ++i)
      backend_.copy_from_host(last_.get() + i * C,
                              x_.get() + rows.sequences[static_cast<size_t>(i)].last_row() * C, C);
    const size_t final_layer = static_cast<size_t>(cfg_.final_layer());
    transformer::forward_layer(
        hooks, final_layer, numels_[final_layer], backend_, [&](const auto& p) {
          backend_.layernorm_forward(lnf_.get(), mean_.get(), rstd_.get(), last_.get(),
                                     p[kLnfWeight], p[kLnfBias], count, C);
        });
    std::vector<int64_t> head_rows(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) head_rows[static_cast<size_t>(i)] = i;
    transformer::forward_layer(hooks, 0, numels_[0], backend_, [&](const auto& p) {
      if (!split())
        return (void)backend_.lm_head_forward(lnf_.get(), p[kWte], nullptr, count, C,
                                              cfg_.vocab_size, head_rows.data(), count, logits);
      std::vector<float> local(static_cast<size_t>(count * vocab_rows_));
      backend_.lm_head_forward(lnf_.get(), p[kWte], nullptr, count, C, vocab_rows_,
                               head_rows.data(), count, local.data());
      transformer::gather_vocab_logits(backend_, local.data(), count, vocab_rows_, vocab_first_,
                                       cfg_.vocab_size, logits, "gpt");
    });
  }

 private:
  // Block l over the rows in x_, its output back in x_.
  template <class P>
  void block(int64_t l, const P& p, Cache& cache, const transformer::DecodeRows& rows) {
    // This rank's heads, attention width and hidden width (all of them
    // without tensor parallelism).
    const int64_t N = rows.rows(), C = cfg_.n_embd, W = cfg_.local_width(), H = cfg_.local_hidden();
    T* x = x_.get();
    backend_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x, p[kLn1Weight], p[kLn1Bias],
                               N, C);
    backend_.matmul_forward(qkv_.get(), ln_.get(), p[kAttnWeight], p[kAttnBias], N, C, 3 * W);
    std::vector<transformer::cpu::CachedRows<T>> attention;
    for (const transformer::DecodeSequence& s : rows.sequences) {
      T* keys = cache.keys(l, s.slot);
      T* values = cache.values(l, s.slot);
      for (int64_t r = 0; r < s.length; ++r) {  // k and v out of the packed q|k|v rows
        const T* row = qkv_.get() + (s.first_row + r) * 3 * W;
        backend_.copy_from_host(keys + (s.position + r) * W, row + W, W);
        backend_.copy_from_host(values + (s.position + r) * W, row + 2 * W, W);
      }
      attention.push_back({qkv_.get() + s.first_row * 3 * W, atty_.get() + s.first_row * W, keys,
                           values, s.position, s.length});
    }
    transformer::cpu::cached_attention(
        attention, {cfg_.local_heads(), cfg_.local_heads(), cfg_.head_size(), 3 * W, W, W});
    backend_.matmul_forward(o_.get(), atty_.get(), p[kAttnProjWeight], once(p[kAttnProjBias]), N, W,
                            C);
    group_sum(o_.get(), N * C);
    backend_.add(x2_.get(), x, o_.get(), N * C);
    backend_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x2_.get(), p[kLn2Weight],
                               p[kLn2Bias], N, C);
    backend_.matmul_forward(fch_.get(), ln_.get(), p[kFcWeight], p[kFcBias], N, C, H);
    backend_.gelu_forward(fch_gelu_.get(), fch_.get(), N * H);
    backend_.matmul_forward(x, fch_gelu_.get(), p[kFcProjWeight], once(p[kFcProjBias]), N, H, C);
    group_sum(x, N * C);
    backend_.add(x, x, x2_.get(), N * C);
  }

  // Buffers for N rows of `count` sequences, grown when a call needs more.
  void allocate(int64_t N, int64_t count) {
    const int64_t C = cfg_.n_embd;
    if (N > rows_) {
      const int64_t W = cfg_.local_width(), H = cfg_.local_hidden();
      tokens_ = backend_.template alloc<int32_t>(N);
      x_ = alloc(N * C), x2_ = alloc(N * C), ln_ = alloc(N * C), o_ = alloc(N * C);
      qkv_ = alloc(N * 3 * W), atty_ = alloc(N * W);
      fch_ = alloc(N * H), fch_gelu_ = alloc(N * H);
      mean_ = backend_.template alloc<S>(N), rstd_ = backend_.template alloc<S>(N);
      rows_ = N;
    }
    if (count > sequences_) {
      last_ = alloc(count * C), lnf_ = alloc(count * C);
      sequences_ = count;
    }
  }
  Buffer<T> alloc(int64_t n) { return backend_.template alloc<T>(n); }
  // Tensor parallelism (gpt_params.cc's split): the group's sum in place; a
  // replicated bias added to a sum by the group's first rank only.
  bool split() const { return cfg_.tp_size > 1; }
  bool first_part() const { return cfg_.tp_rank == 0; }
  const T* once(const T* bias) const { return first_part() ? bias : nullptr; }
  void group_sum(T* data, int64_t n) {
    if (split()) transformer::group_sum(backend_, data, n, "gpt");
  }

  const GptConfig& cfg_;
  Backend& backend_;
  int64_t vocab_first_, vocab_rows_;  // this rank's rows of wte (all of them unsplit)
  std::vector<std::vector<int64_t>> numels_;
  int64_t rows_ = 0, sequences_ = 0;  // what the buffers hold
  Buffer<int32_t> tokens_;
  Buffer<T> x_, x2_, ln_, o_, qkv_, atty_, fch_, fch_gelu_, last_, lnf_;
  Buffer<S> mean_, rstd_;
};

}  // namespace dscore::gpt
