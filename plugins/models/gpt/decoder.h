// The gpt's KV-cached generation (model.h decode) over a host-memory
// backend: each decode() call runs only the new tokens of its sequences
// through the layers, as packed rows (N = their sum), their token and
// position embeddings at their positions, appending each block's keys and
// values to the cache, attending over the cache (transformer_common/cpu/
// cached_attention.h), and the tied head at each sequence's last new
// token. The block is the runner's (runner.h) unfused form: the same
// kernels, fp32 activations, bf16 products where the views are bf16. MoE
// blocks are refused: their capacity-limited routes depend on the whole
// window (the host then generates without the cache).
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
      : cfg_(config), backend_(backend) {
    for (size_t l = 0; l < static_cast<size_t>(config.layer_count()); ++l)
      numels_.push_back(params.layer_numels(l));
  }

  std::unique_ptr<sdk::DecodeCache> make_cache(int64_t slots, int64_t max_positions) {
    if (cfg_.has_moe())
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "gpt: KV-cached generation of MoE layers is not supported (their "
                       "capacity-limited routes depend on the whole window)");
    transformer::check_cache_request(max_positions, cfg_.block_size,
                                     cfg_.tp_size > 1 || cfg_.sp_size > 1, "gpt");
    return std::make_unique<Cache>(backend_, cfg_.n_layer, slots, max_positions, cfg_.n_embd);
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
          for (const transformer::DecodeSequence& s : rows.sequences)
            backend_.encoder_forward(x_.get() + s.first_row * C, tokens_.get() + s.first_row,
                                     p[kWte], p[kWpe] + s.position * C, 1, s.length, C);
        });
      }
      transformer::forward_layer(hooks, static_cast<size_t>(l + 1), numels_[l + 1], backend_,
                                 [&](const auto& p) { block(l, p, cache, rows); });
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
      backend_.lm_head_forward(lnf_.get(), p[kWte], nullptr, count, C, cfg_.vocab_size,
                               head_rows.data(), count, logits);
    });
  }

 private:
  // Block l over the rows in x_, its output back in x_.
  template <class P>
  void block(int64_t l, const P& p, Cache& cache, const transformer::DecodeRows& rows) {
    const int64_t N = rows.rows(), C = cfg_.n_embd, H = 4 * cfg_.n_embd;
    T* x = x_.get();
    backend_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x, p[kLn1Weight], p[kLn1Bias],
                               N, C);
    backend_.matmul_forward(qkv_.get(), ln_.get(), p[kAttnWeight], p[kAttnBias], N, C, 3 * C);
    std::vector<transformer::cpu::CachedRows<T>> attention;
    for (const transformer::DecodeSequence& s : rows.sequences) {
      T* keys = cache.keys(l, s.slot);
      T* values = cache.values(l, s.slot);
      for (int64_t r = 0; r < s.length; ++r) {  // k and v out of the packed q|k|v rows
        const T* row = qkv_.get() + (s.first_row + r) * 3 * C;
        backend_.copy_from_host(keys + (s.position + r) * C, row + C, C);
        backend_.copy_from_host(values + (s.position + r) * C, row + 2 * C, C);
      }
      attention.push_back({qkv_.get() + s.first_row * 3 * C, atty_.get() + s.first_row * C, keys,
                           values, s.position, s.length});
    }
    transformer::cpu::cached_attention(attention,
                                       {cfg_.n_head, cfg_.n_head, cfg_.head_size(), 3 * C, C, C});
    backend_.matmul_forward(o_.get(), atty_.get(), p[kAttnProjWeight], p[kAttnProjBias], N, C, C);
    backend_.add(x2_.get(), x, o_.get(), N * C);
    backend_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x2_.get(), p[kLn2Weight],
                               p[kLn2Bias], N, C);
    backend_.matmul_forward(fch_.get(), ln_.get(), p[kFcWeight], p[kFcBias], N, C, H);
    backend_.gelu_forward(fch_gelu_.get(), fch_.get(), N * H);
    backend_.matmul_forward(x, fch_gelu_.get(), p[kFcProjWeight], p[kFcProjBias], N, H, C);
    backend_.add(x, x, x2_.get(), N * C);
  }

  // Buffers for N rows of `count` sequences, grown when a call needs more.
  void allocate(int64_t N, int64_t count) {
    const int64_t C = cfg_.n_embd;
    if (N > rows_) {
      tokens_ = backend_.template alloc<int32_t>(N);
      x_ = alloc(N * C), x2_ = alloc(N * C), ln_ = alloc(N * C), o_ = alloc(N * C);
      qkv_ = alloc(N * 3 * C), atty_ = alloc(N * C);
      fch_ = alloc(N * 4 * C), fch_gelu_ = alloc(N * 4 * C);
      mean_ = backend_.template alloc<S>(N), rstd_ = backend_.template alloc<S>(N);
      rows_ = N;
    }
    if (count > sequences_) {
      last_ = alloc(count * C), lnf_ = alloc(count * C);
      sequences_ = count;
    }
  }
  Buffer<T> alloc(int64_t n) { return backend_.template alloc<T>(n); }

  const GptConfig& cfg_;
  Backend& backend_;
  std::vector<std::vector<int64_t>> numels_;
  int64_t rows_ = 0, sequences_ = 0;  // what the buffers hold
  Buffer<int32_t> tokens_;
  Buffer<T> x_, x2_, ln_, o_, qkv_, atty_, fch_, fch_gelu_, last_, lnf_;
  Buffer<S> mean_, rstd_;
};

}  // namespace dscore::gpt
