// GPT-2 forward and backward through the host hooks, written once over a
// compute backend (cpu/cpu_backend.h; cuda/cuda_backend.h). The runner owns
// the order of work and the activations; a backend owns memory and kernels:
//
//   Scalar, Stat             activation/parameter type; LayerNorm statistics type
//   Buffer<X>, alloc<X>(n)   owning memory of n X; X* get()
//   zero(p, n), copy_tokens(dst, host, n)
//   load_params(views, numels) -> params[i] as const Scalar*
//   grads(views, numels)       -> grads[i] as Scalar* (+=); commit() adds them into the views
//   attention_state_elements(B, T, NH): what attention_forward keeps for
//     attention_backward (CPU: a logsumexp per query row; CUDA: the T x T
//     probabilities), so the state's layout is the backend's decision
//   optionally the fused block's calls (kFusedBlock below: LayerNorms
//     writing operand buffers, the linears reading them, the MLP as one
//     call); without them the runner calls the kernels one by one
//   the kernels of cpu/kernels.h and cpu/attention.h with the same arguments
//     (lm_head_forward writes host logits)
//
// Every activation size comes from activation_elements (activations.h).
//
// Layers: 0 = embeddings (wte, wpe), 1..L = blocks, L+1 = final LayerNorm.
// The tied LM head needs wte after the last block, so layer 0 is acquired
// twice per pass: a BACKWARD acquire right after ln_f runs the head and its
// gradient (the N x V logits are never all alive), and the last acquire of
// backward adds the embedding gradients and calls grads_ready. Blocks under
// activation checkpointing keep only their input and recompute the rest
// inside their backward acquire.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/model.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <concepts>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "../transformer_common/counting_backend.h"
#include "../transformer_common/layer_pass.h"
#include "../transformer_common/pass_memory.h"
#include "../transformer_common/tensor_parallel.h"
#include "activations.h"
#include "decoder.h"
#include "gpt_config.h"
#include "gpt_params.h"
#include "moe_mlp.h"
#include "tokens.h"

namespace dscore::gpt {

using transformer::backward_block_layers;
using transformer::backward_block_range;
using transformer::backward_layer;
using transformer::backward_layer_grads;
using transformer::forward_block_layers;
using transformer::forward_block_range;
using transformer::forward_layer;
using transformer::GradsReady;

template <class Backend>
class GptRunner {
 public:
  using T = typename Backend::Scalar;
  using S = typename Backend::Stat;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;
  using Decoder = GptDecoder<Backend>;  // KV-cached generation (decoder.h)

  // Blocks [lo, hi) (all of them by default: hi < 0): a pipeline stage's
  // runner keeps its own blocks' activations only.
  GptRunner(const GptConfig& config, const GptParams& params, Backend& backend, int64_t lo = 0,
            int64_t hi = -1)
      : cfg_(config),
        backend_(backend),
        lo_(lo),
        hi_(hi < 0 ? config.n_layer : hi),
        vocab_first_(params.vocab_first()),
        vocab_rows_(params.vocab_rows()),
        moe_(cfg_, backend, params.seed()) {
    for (size_t l = 0; l < static_cast<size_t>(config.layer_count()); ++l)
      numels_.push_back(params.layer_numels(l));
  }

  // What the MoE blocks did in the last pass (moe_mlp.h).
  const MoeStats& moe_stats() const { return moe_.stats(); }

  // Mean loss over the counted targets; adds d(loss_scale * loss)/d(param)
  // into the gradient views.
  double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                          double loss_scale) {
    if (tokens.counted_targets == 0)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       "gpt: the batch has no targets (every token is padding)");
    prepare(tokens, /*training=*/true);
    aux_grad_ = loss_scale * cfg_.moe_loss_coeff;
    forward_blocks(hooks);
    const double loss_sum = head_backward(hooks, loss_scale, tokens, GradsReady::kNo);
    blocks_backward(hooks, 0, cfg_.n_layer);
    embedding_backward(hooks);
    // The loss trained on: the LM loss and moe_loss_coeff * l_aux of each MoE block.
    return loss_sum / static_cast<double>(tokens.counted_targets) +
           cfg_.moe_loss_coeff * moe_.stats().aux_loss;
  }

  // ---- pipeline stages (model.h stage_forward/stage_backward): layers
  // [first, end) of embeddings (0), blocks (1..L) and the final LayerNorm
  // with the tied LM head (L + 1). The boundary at layer k is the input of
  // layer k, residual(k - 1): (B, T, C) of Scalar.
  int64_t boundary_elements(int64_t batch) const {
    return batch * cfg_.local_tokens() * cfg_.n_embd;
  }

  void stage_forward(const SplitTokens& tokens, size_t first, size_t end,
                     const dscore_model_hooks& hooks, const T* input, T* output) {
    if (cfg_.has_moe())
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "gpt: MoE blocks under pipeline parallelism are not supported yet; "
                       "train MoE with \"pipeline\": {\"stages\": 1}");
    prepare(tokens, /*training=*/true);
    const int64_t lo = block_of(first), hi = block_of(end);
    if (first == 0) embed_forward(hooks);
    const int64_t n = B_ * cfg_.local_tokens() * cfg_.n_embd;
    forward_block_range(hooks, lo, hi, numels_, backend_, block_gemm_weights(cfg_.has_moe()),
                        [&](int64_t l, const auto& p) {
                          if (l == lo && first > 0) {
                            ensure_activations();
                            backend_.copy_from_host(residual(lo), input, n);
                          }
                          check_operand_form(p, l);
                          block_forward(l, p, residual(l), residual(l + 1), block_acts(l));
                        });
    if (static_cast<int64_t>(end) == cfg_.layer_count()) {
      final_forward(hooks, [&] {
        if (lo == hi && first > 0) {  // a stage of the final layer alone
          ensure_activations();
          backend_.copy_from_host(residual(hi), input, n);
        }
      });
    } else {
      backend_.copy_to_host(output, residual(hi), n);
    }
  }

  // Returns the loss on the last stage (0 elsewhere).
  double stage_backward(const SplitTokens& tokens, size_t first, size_t end,
                        const dscore_model_hooks& hooks, double loss_scale, const T* output_grad,
                        T* input_grad) {
    if (tokens.batch != B_ || !activations_ready_)
      throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                       "gpt: stage_backward of a slot without its stage_forward");
    const int64_t lo = block_of(first), hi = block_of(end);
    const int64_t n = B_ * cfg_.local_tokens() * cfg_.n_embd;
    double loss_sum = 0;
    if (static_cast<int64_t>(end) == cfg_.layer_count()) {
      if (tokens.counted_targets == 0)
        throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                         "gpt: the batch has no targets (every token is padding)");
      // Without the embeddings here, this stage's copy of layer 0 is done
      // with once the head is.
      loss_sum =
          head_backward(hooks, loss_scale, tokens, first == 0 ? GradsReady::kNo : GradsReady::kYes);
    } else {
      backend_.copy_from_host(acts_.dresid.get(), output_grad, n);
    }
    blocks_backward(hooks, lo, hi);
    if (first == 0)
      embedding_backward(hooks);
    else
      backend_.copy_to_host(input_grad, acts_.dresid.get(), n);
    return tokens.counted_targets > 0 ? loss_sum / static_cast<double>(tokens.counted_targets)
                                      : 0.0;
  }

  // The block a layer index starts at (layer l + 1 is block l), clamped to
  // the blocks.
  int64_t block_of(size_t layer) const {
    return std::clamp<int64_t>(static_cast<int64_t>(layer) - 1, 0, cfg_.n_layer);
  }

  // Forward only: the mean loss over counted targets if `loss` is set, and
  // the logits (B, V) at each sample's last input position into `logits`
  // (host fp32) if non-null.
  void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
               float* logits) {
    prepare(tokens, /*training=*/false);
    forward_blocks(hooks);
    const int64_t N = B_ * cfg_.local_tokens();
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < B_; ++b)
      rows.push_back(b * cfg_.local_tokens() + tokens.last_position[b]);
    const bool want_loss = loss != nullptr && tokens.counted_targets > 0;
    double sum = 0;
    if (cfg_.sequence().split() && logits != nullptr)
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "gpt: logits (generation) under sequence parallelism are not supported; "
                       "generate with sequence_parallel_size 1");
    if (split() && logits != nullptr)
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "gpt: logits (generation) under tensor parallelism are not supported yet; "
                       "generate with tensor_parallel.autotp_size 1");
    forward_layer(hooks, 0, numels_[0], backend_, [&](const auto& p) {
      if (split())
        sum = want_loss ? vocab_parallel_head(nullptr, nullptr, p[kWte], 0.0) : 0.0;
      else
        sum = backend_.lm_head_forward(
            acts_.lnf.get(), p[kWte], want_loss ? targets_.get() : nullptr, N, cfg_.n_embd,
            cfg_.vocab_size, rows.data(), logits != nullptr ? B_ : 0, logits);
    });
    if (loss != nullptr)
      *loss = want_loss ? sum / static_cast<double>(tokens.counted_targets) : 0.0;
  }

 private:
  struct BlockActs {
    // attention_state: what the backend's attention keeps for backward
    // (CPU: a logsumexp per query row; CUDA: the T x T probabilities).
    // heads_out: attention's output in the heads layout (sequence
    // parallelism only; a.qkv then holds its input in that layout).
    Buffer<T> ln1, qkv, atty, attention_state, x2, ln2, fch, fch_gelu, heads_out;
    Buffer<S> mean1, rstd1, mean2, rstd2;
  };
  struct Activations {
    Buffer<T> resid;  // (L + 1) x N x C: the input of every block, then the last block's output
    Buffer<T> lnf, dlnf, dresid;
    Buffer<S> lnf_mean, lnf_rstd;
    std::vector<BlockActs> blocks;  // one per kept block, plus one shared by checkpointed blocks
    // backward scratch
    Buffer<T> dfch_gelu, dfch, dln, datty, dqkv;
    Buffer<T> heads_dqkv;  // sequence parallelism: attention's input gradient, heads layout
  };

  // A backend may fuse the block's work (the CPU's does; others run the
  // kernels one by one): the LayerNorms write their outputs as operands of
  // the linear that reads them (rounded to bf16 as written, in bf16
  // layers), attention keeps its rounded heads for its backward, the
  // residual add runs inside the second LayerNorm, and the MLP is one call
  // (the GELU activations and gradients made as operands, the GELU
  // gradient fused with the fc bias gradient).
  static constexpr bool kFusedBlock = requires(Backend & b, T* t, S* s, const T* c) {
    { b.bf16_compute() } -> std::convertible_to<bool>;
    { b.bf16_operand_for(c) } -> std::convertible_to<bool>;
    b.layernorm_forward_operand(t, s, s, c, c, c, int64_t{}, int64_t{}, c);
    b.residual_layernorm_forward_operand(t, t, s, s, c, c, c, c, int64_t{}, int64_t{}, c);
    b.matmul_forward_operand(t, c, c, c, int64_t{}, int64_t{}, int64_t{});
    b.matmul_backward_operand(t, t, t, c, c, c, int64_t{}, int64_t{}, int64_t{});
    b.qkv_attention_forward(t, t, t, c, c, c, int64_t{}, int64_t{}, int64_t{}, int64_t{},
                            int64_t{});
    b.attention_backward_kept(t, c, c, c, c, bool{}, int64_t{}, int64_t{}, int64_t{}, int64_t{});
    b.mlp_forward(t, t, t, c, c, c, c, c, int64_t{}, int64_t{}, int64_t{});
    b.mlp_backward(t, t, t, t, t, t, t, c, c, c, c, c, c, int64_t{}, int64_t{}, int64_t{});
  };

  bool checkpointed(int64_t l) const { return l < cfg_.checkpoint_blocks; }
  BlockActs& block_acts(int64_t l) {
    return checkpointed(l)
               ? acts_.blocks.back()
               : acts_.blocks[static_cast<size_t>(l - std::max(lo_, cfg_.checkpoint_blocks))];
  }
  // Block l's input (residual(l + 1) its output), for blocks lo_ .. hi_.
  T* residual(int64_t l) const {
    return acts_.resid.get() + (l - lo_) * B_ * cfg_.local_tokens() * cfg_.n_embd;
  }

  // The LM head and its gradient through layer 0 (the tied wte), then the
  // final LayerNorm's backward: dresid holds the gradient at the last
  // block's output. Returns the loss summed over counted targets.
  double head_backward(const dscore_model_hooks& hooks, double loss_scale,
                       const SplitTokens& tokens, GradsReady embedding_ready) {
    const int64_t N = B_ * cfg_.local_tokens(), C = cfg_.n_embd;
    double loss_sum = 0;
    // dlnf = d loss / d ln_f output
    const double grad_scale = loss_scale / static_cast<double>(tokens.counted_targets);
    backward_layer(hooks, 0, numels_[0], backend_, embedding_ready, [&](const auto& p, auto& g) {
      if (split())
        loss_sum = vocab_parallel_head(acts_.dlnf.get(), g[kWte], p[kWte], grad_scale);
      else
        loss_sum =
            backend_.lm_head_forward_backward(acts_.dlnf.get(), g[kWte], acts_.lnf.get(), p[kWte],
                                              targets_.get(), N, C, cfg_.vocab_size, grad_scale);
    });
    const size_t final_layer = static_cast<size_t>(cfg_.final_layer());
    backward_layer(hooks, final_layer, numels_[final_layer], backend_, GradsReady::kYes,
                   [&](const auto& p, auto& g) {
                     T* d = acts_.dresid.get();
                     backend_.zero(d, N * C);
                     backend_.layernorm_backward(d, g[kLnfWeight], g[kLnfBias], acts_.dlnf.get(),
                                                 residual(hi_), p[kLnfWeight], acts_.lnf_mean.get(),
                                                 acts_.lnf_rstd.get(), N, C);
                   });
    return loss_sum;
  }
  // Blocks [lo, hi) backward from dresid (the gradient at block hi - 1's
  // output), leaving the gradient at block lo's input there.
  void blocks_backward(const dscore_model_hooks& hooks, int64_t lo, int64_t hi) {
    backward_block_range(hooks, lo, hi, numels_, backend_, block_gemm_weights(cfg_.has_moe()),
                         [&](int64_t l, const auto& p, auto& g) {
                           BlockActs& a = block_acts(l);
                           if (checkpointed(l))
                             block_forward(l, p, residual(l), nullptr, a);  // recompute
                           block_backward(l, p, g, residual(l), a, acts_.dresid.get());
                         });
  }
  // The embeddings' gradients from dresid (wte's second contribution), then
  // grads_ready.
  void embedding_backward(const dscore_model_hooks& hooks) {
    backward_layer_grads(hooks, 0, numels_[0], backend_, GradsReady::kYes, [&](auto& g) {
      if (split()) {
        if constexpr (requires {
                        backend_.encoder_backward_part(g[kWte], nullptr, nullptr, nullptr, 0, 0, 0,
                                                       0, 0);
                      })
          backend_.encoder_backward_part(g[kWte], positions(g[kWpe]), acts_.dresid.get(),
                                         inputs_.get(), B_, cfg_.local_tokens(), cfg_.n_embd,
                                         vocab_first_, vocab_rows_);
        else
          transformer::cpu_only("gpt");
      } else {
        backend_.encoder_backward(g[kWte], positions(g[kWpe]), acts_.dresid.get(), inputs_.get(),
                                  B_, cfg_.local_tokens(), cfg_.n_embd);
      }
    });
  }

  // Every size from activation_elements (activations.h), so a memory
  // estimate and the allocation cannot drift apart.
  void alloc_block(BlockActs& a, const ActivationElements::Block& e) {
    a.ln1 = backend_.template alloc<T>(e.ln1);
    a.qkv = backend_.template alloc<T>(e.qkv);
    a.atty = backend_.template alloc<T>(e.atty);
    a.attention_state = backend_.template alloc<T>(e.attention_state);
    a.x2 = backend_.template alloc<T>(e.x2);
    a.ln2 = backend_.template alloc<T>(e.ln2);
    a.fch = backend_.template alloc<T>(e.fch);
    a.fch_gelu = backend_.template alloc<T>(e.fch_gelu);
    a.heads_out = backend_.template alloc<T>(e.heads_out);
    a.mean1 = backend_.template alloc<S>(e.stat);
    a.rstd1 = backend_.template alloc<S>(e.stat);
    a.mean2 = backend_.template alloc<S>(e.stat);
    a.rstd2 = backend_.template alloc<S>(e.stat);
  }

  // Tokens into backend memory (their buffers made anew when B changes;
  // the activations then follow in the first layer's acquire), and the MoE
  // blocks' pass (its noise keyed by the samples).
  void prepare(const SplitTokens& tokens, bool training) {
    const int64_t N = tokens.batch * cfg_.local_tokens();
    if (tokens.batch != B_) allocate_tokens(tokens.batch);
    backend_.copy_tokens(inputs_.get(), tokens.inputs.data(), N);
    backend_.copy_tokens(targets_.get(), tokens.targets.data(), N);
    moe_.begin_pass(tokens.sample_keys, cfg_.local_tokens(), cfg_.sequence().first(), training);
  }

  // Whether the acquired layer's linears read bf16 operands: the form of
  // the operand buffers (kFusedBlock), known once a layer's parameters are.
  bool layer_reads_bf16() const {
    if constexpr (kFusedBlock) return backend_.bf16_compute();
    return false;
  }
  // In the first layer's acquire: the activations, (re)made when the batch
  // or the operands' form changed.
  void ensure_activations() {
    const bool bf16 = layer_reads_bf16();
    if (!activations_ready_ || bf16 != bf16_operands_) allocate_activations(bf16);
  }
  // The operand buffers were sized for one form: a layer of the other (its
  // parameters of another dtype than layer 0's) would overrun them.
  template <class P>
  void check_operand_form(const P& p, int64_t l) const {
    if constexpr (kFusedBlock) {
      for (size_t reader : {kAttnWeight, kFcWeight, kFcProjWeight}) {
        if (reader != kAttnWeight && cfg_.moe_block(l)) continue;  // no such linears
        transformer::check_operand_form("gpt", l, backend_.bf16_operand_for(p[reader]),
                                        bf16_operands_);
      }
    }
  }

  void allocate_tokens(int64_t batch) {
    B_ = batch;
    const int64_t N = batch * cfg_.local_tokens();
    inputs_ = backend_.template alloc<int32_t>(N);
    targets_ = backend_.template alloc<int32_t>(N);
    acts_ = Activations{};
    activations_ready_ = false;
  }

 public:
  // Every buffer a pass over `batch` samples uses with operands of that
  // form, allocated once and kept while the batch size and the form stay.
  // activation_bytes() (below) counts these same calls, so what the model
  // declares is what it allocates.
  void allocate(int64_t batch, bool bf16_operands) {
    allocate_tokens(batch);
    allocate_activations(bf16_operands);
  }

 private:
  void allocate_activations(bool bf16_operands) {
    const ActivationElements e =
        activation_elements(cfg_, B_,
                            backend_.attention_state_elements(
                                B_, cfg_.block_size, cfg_.local_heads() / cfg_.sequence().size),
                            bf16_operands, lo_, hi_);
    acts_ = Activations{};
    acts_.resid = backend_.template alloc<T>(e.resid);
    acts_.lnf = backend_.template alloc<T>(e.lnf);
    acts_.dlnf = backend_.template alloc<T>(e.dlnf);
    acts_.dresid = backend_.template alloc<T>(e.dresid);
    acts_.lnf_mean = backend_.template alloc<S>(e.lnf_stat);
    acts_.lnf_rstd = backend_.template alloc<S>(e.lnf_stat);
    acts_.blocks.resize(static_cast<size_t>(e.kept_blocks));
    for (BlockActs& a : acts_.blocks) alloc_block(a, e.block);
    acts_.dfch_gelu = backend_.template alloc<T>(e.dfch_gelu);
    acts_.dfch = backend_.template alloc<T>(e.dfch);
    acts_.dln = backend_.template alloc<T>(e.dln);
    acts_.datty = backend_.template alloc<T>(e.datty);
    acts_.dqkv = backend_.template alloc<T>(e.dqkv);
    acts_.heads_dqkv = backend_.template alloc<T>(e.heads_dqkv);
    moe_.allocate(B_ * cfg_.local_tokens(), lo_, hi_);
    bf16_operands_ = bf16_operands;
    activations_ready_ = true;
  }

  void forward_blocks(const dscore_model_hooks& hooks) {
    embed_forward(hooks);
    forward_block_layers(hooks, cfg_.n_layer, numels_, backend_, block_gemm_weights(cfg_.has_moe()),
                         [&](int64_t l, const auto& p) {
                           check_operand_form(p, l);
                           block_forward(l, p, residual(l), residual(l + 1), block_acts(l));
                         });
    final_forward(hooks);
  }
  void embed_forward(const dscore_model_hooks& hooks) {
    forward_layer(hooks, 0, numels_[0], backend_, [&](const auto& p) {
      ensure_activations();
      if (split()) {
        // Each rank embeds the tokens of its vocabulary rows (the first
        // adds the positions too); the group's sum is the embedding.
        if constexpr (requires {
                        backend_.encoder_forward_part(nullptr, nullptr, p[kWte], nullptr, 0, 0, 0,
                                                      0, 0);
                      }) {
          backend_.encoder_forward_part(
              residual(0), inputs_.get(), p[kWte], first_part() ? positions(p[kWpe]) : nullptr, B_,
              cfg_.local_tokens(), cfg_.n_embd, vocab_first_, vocab_rows_);
          group_sum(residual(0), B_ * cfg_.local_tokens() * cfg_.n_embd);
        } else {
          transformer::cpu_only("gpt");
        }
      } else {
        backend_.encoder_forward(residual(0), inputs_.get(), p[kWte], positions(p[kWpe]), B_,
                                 cfg_.local_tokens(), cfg_.n_embd);
      }
    });
  }
  // prologue: runs first inside the layer's acquire.
  void final_forward(const dscore_model_hooks& hooks, const std::function<void()>& prologue = {}) {
    const int64_t N = B_ * cfg_.local_tokens(), C = cfg_.n_embd;
    const size_t l = static_cast<size_t>(cfg_.final_layer());
    forward_layer(hooks, l, numels_[l], backend_, [&](const auto& p) {
      if (prologue) prologue();
      backend_.layernorm_forward(acts_.lnf.get(), acts_.lnf_mean.get(), acts_.lnf_rstd.get(),
                                 residual(hi_), p[kLnfWeight], p[kLnfBias], N, C);
    });
  }

  // x: the block's input; out: its output (null when recomputing: only the
  // activations are wanted, the output already exists).
  template <class P>
  void block_forward(int64_t l, const P& p, const T* x, T* out, BlockActs& a) {
    const int64_t N = B_ * cfg_.local_tokens(), C = cfg_.n_embd;
    // This rank's heads, attention width and hidden width (all of them
    // without tensor parallelism). A split projection's output is this
    // rank's part of a sum (group_sum makes it whole), so its replicated
    // bias is added on the first rank only.
    const int64_t NH = cfg_.local_heads(), W = cfg_.local_width(), H = cfg_.local_hidden();
    const T* attn_bias = once(p[kAttnProjBias]);
    const T* proj_bias = once(p[kFcProjBias]);
    if constexpr (kFusedBlock) {
      backend_.layernorm_forward_operand(a.ln1.get(), a.mean1.get(), a.rstd1.get(), x,
                                         p[kLn1Weight], p[kLn1Bias], N, C, p[kAttnWeight]);
      if (cfg_.sequence().split()) {
        // The local q|k|v rows go through dqkv (backward scratch, free here).
        backend_.matmul_forward_operand(acts_.dqkv.get(), a.ln1.get(), p[kAttnWeight], p[kAttnBias],
                                        N, C, 3 * W);
        sequence_attention_forward(acts_.dqkv.get(), a);
      } else {
        // In bf16 form a.qkv keeps attention's rounded heads.
        backend_.qkv_attention_forward(a.atty.get(), a.attention_state.get(), a.qkv.get(),
                                       a.ln1.get(), p[kAttnWeight], p[kAttnBias], B_,
                                       cfg_.local_tokens(), C, W, NH);
      }
      // The attention projection goes through dln (backward scratch, free
      // here: a recompute runs before its block's backward uses it), as ln2
      // is written in another form than the projection's output.
      T* projection = acts_.dln.get();
      backend_.matmul_forward(projection, a.atty.get(), p[kAttnProjWeight], attn_bias, N, W, C);
      group_sum(projection, N * C);
      if (cfg_.moe_block(l)) return moe_block_forward(l, p, x, projection, out, a);
      backend_.residual_layernorm_forward_operand(a.x2.get(), a.ln2.get(), a.mean2.get(),
                                                  a.rstd2.get(), x, projection, p[kLn2Weight],
                                                  p[kLn2Bias], N, C, p[kFcWeight]);
      backend_.mlp_forward(out, a.fch.get(), a.fch_gelu.get(), a.ln2.get(), p[kFcWeight],
                           p[kFcBias], p[kFcProjWeight], proj_bias, N, C, H);
      if (out == nullptr) return;
    } else {
      backend_.layernorm_forward(a.ln1.get(), a.mean1.get(), a.rstd1.get(), x, p[kLn1Weight],
                                 p[kLn1Bias], N, C);
      if (cfg_.sequence().split()) {
        backend_.matmul_forward(acts_.dqkv.get(), a.ln1.get(), p[kAttnWeight], p[kAttnBias], N, C,
                                3 * W);
        sequence_attention_forward(acts_.dqkv.get(), a);
      } else {
        backend_.matmul_forward(a.qkv.get(), a.ln1.get(), p[kAttnWeight], p[kAttnBias], N, C,
                                3 * W);
        backend_.attention_forward(a.atty.get(), a.attention_state.get(), a.qkv.get(), B_,
                                   cfg_.local_tokens(), W, NH);
      }
      // The attention projection goes through ln2's buffer (overwritten next).
      backend_.matmul_forward(a.ln2.get(), a.atty.get(), p[kAttnProjWeight], attn_bias, N, W, C);
      group_sum(a.ln2.get(), N * C);
      if (cfg_.moe_block(l)) return moe_block_forward(l, p, x, a.ln2.get(), out, a);
      backend_.add(a.x2.get(), x, a.ln2.get(), N * C);
      backend_.layernorm_forward(a.ln2.get(), a.mean2.get(), a.rstd2.get(), a.x2.get(),
                                 p[kLn2Weight], p[kLn2Bias], N, C);
      backend_.matmul_forward(a.fch.get(), a.ln2.get(), p[kFcWeight], p[kFcBias], N, C, H);
      backend_.gelu_forward(a.fch_gelu.get(), a.fch.get(), N * H);
      if (out == nullptr) return;
      backend_.matmul_forward(out, a.fch_gelu.get(), p[kFcProjWeight], proj_bias, N, H, C);
    }
    group_sum(out, N * C);
    backend_.add(out, out, a.x2.get(), N * C);
  }

  // d: the gradient at the block's output on entry, at its input on return.
  // Under tensor parallelism d is whole on every rank; the input gradients
  // of the split linears (q|k|v and c_fc) are this rank's part of a sum
  // (group_sum makes them whole before each LayerNorm's backward), and the
  // replicated parameters' gradients come out equal on every rank.
  template <class P, class G>
  void block_backward(int64_t l, const P& p, G& g, const T* x, const BlockActs& a, T* d) {
    const int64_t N = B_ * cfg_.local_tokens(), C = cfg_.n_embd;
    const int64_t NH = cfg_.local_heads(), W = cfg_.local_width(), H = cfg_.local_hidden();
    if (cfg_.moe_block(l)) {
      if constexpr (kHostMoe)
        moe_.backward(l, p, g, d, acts_.dln.get(), aux_grad_);
      else
        transformer::cpu_only("gpt");
    } else if constexpr (kFusedBlock) {
      backend_.mlp_backward(acts_.dln.get(), g[kFcWeight], g[kFcBias], g[kFcProjWeight],
                            g[kFcProjBias], acts_.dfch_gelu.get(), acts_.dfch.get(), d, a.ln2.get(),
                            a.fch.get(), a.fch_gelu.get(), p[kFcWeight], p[kFcProjWeight], N, C, H);
    } else {
      backend_.matmul_backward(acts_.dfch_gelu.get(), g[kFcProjWeight], g[kFcProjBias], d,
                               a.fch_gelu.get(), p[kFcProjWeight], N, H, C);
      backend_.gelu_backward(acts_.dfch.get(), a.fch.get(), acts_.dfch_gelu.get(), N * H);
      backend_.matmul_backward(acts_.dln.get(), g[kFcWeight], g[kFcBias], acts_.dfch.get(),
                               a.ln2.get(), p[kFcWeight], N, C, H);
    }
    group_sum(acts_.dln.get(), N * C);
    backend_.layernorm_backward(d, g[kLn2Weight], g[kLn2Bias], acts_.dln.get(), a.x2.get(),
                                p[kLn2Weight], a.mean2.get(), a.rstd2.get(), N, C);
    backend_.matmul_backward(acts_.datty.get(), g[kAttnProjWeight], g[kAttnProjBias], d,
                             a.atty.get(), p[kAttnProjWeight], N, W, C);
    if constexpr (kFusedBlock) {
      if (cfg_.sequence().split())
        sequence_attention_backward(a);
      else
        backend_.attention_backward_kept(acts_.dqkv.get(), acts_.datty.get(), a.qkv.get(),
                                         a.atty.get(), a.attention_state.get(), bf16_operands_, B_,
                                         cfg_.local_tokens(), W, NH);
      backend_.matmul_backward_operand(acts_.dln.get(), g[kAttnWeight], g[kAttnBias],
                                       acts_.dqkv.get(), a.ln1.get(), p[kAttnWeight], N, C, 3 * W);
    } else {
      if (cfg_.sequence().split())
        sequence_attention_backward(a);
      else
        backend_.attention_backward(acts_.dqkv.get(), acts_.datty.get(), a.qkv.get(), a.atty.get(),
                                    a.attention_state.get(), B_, cfg_.local_tokens(), W, NH);
      backend_.matmul_backward(acts_.dln.get(), g[kAttnWeight], g[kAttnBias], acts_.dqkv.get(),
                               a.ln1.get(), p[kAttnWeight], N, C, 3 * W);
    }
    group_sum(acts_.dln.get(), N * C);
    backend_.layernorm_backward(d, g[kLn1Weight], g[kLn1Bias], acts_.dln.get(), x, p[kLn1Weight],
                                a.mean1.get(), a.rstd1.get(), N, C);
  }

  // An MoE block's second half (moe_mlp.h): x2 = x + the attention's
  // projection, the second LayerNorm into the MoE's input, its MLP, and
  // the residual (out null: the activations only, recomputing).
  template <class P>
  void moe_block_forward(int64_t l, const P& p, const T* x, const T* projection, T* out,
                         BlockActs& a) {
    if constexpr (kHostMoe) {
      const int64_t N = B_ * cfg_.local_tokens(), C = cfg_.n_embd;
      backend_.add(a.x2.get(), x, projection, N * C);
      backend_.layernorm_forward(moe_.input(l), a.mean2.get(), a.rstd2.get(), a.x2.get(),
                                 p[kLn2Weight], p[kLn2Bias], N, C);
      moe_.forward(l, p, out, /*recompute=*/out == nullptr);
      if (out != nullptr) backend_.add(out, out, a.x2.get(), N * C);
    } else {
      transformer::cpu_only("gpt");
    }
  }

  // ---- sequence parallelism (cfg_.sp_size > 1; sequence_parallel.h)
  // The position embedding's rows (or their gradients) of this rank's
  // slice of the sequence.
  template <class X>
  X* positions(X* wpe) const {
    return wpe + cfg_.sequence().first() * cfg_.n_embd;
  }
  // Attention on the whole sequence for this rank's share of the heads: the
  // local q|k|v rows (N, 3W) go to a.qkv in the heads layout, attention
  // writes a.heads_out there, and its rows come back to a.atty (N, W).
  void sequence_attention_forward(const T* local_qkv, BlockActs& a) {
    const transformer::SequenceSlice s = cfg_.sequence();
    const int64_t W = cfg_.local_width(), NH = cfg_.local_heads();
    sequence_to(Layout::kHeads, local_qkv, a.qkv.get(), W, 3);
    backend_.attention_forward(a.heads_out.get(), a.attention_state.get(), a.qkv.get(), B_,
                               s.tokens, W / s.size, NH / s.size);
    sequence_to(Layout::kTokens, a.heads_out.get(), a.atty.get(), W, 1);
  }
  // From the gradient at a.atty (acts_.datty) to the local q|k|v rows'
  // (acts_.dqkv); acts_.dln is scratch.
  void sequence_attention_backward(const BlockActs& a) {
    const transformer::SequenceSlice s = cfg_.sequence();
    const int64_t W = cfg_.local_width(), NH = cfg_.local_heads();
    T* heads_dout = acts_.dln.get();
    sequence_to(Layout::kHeads, acts_.datty.get(), heads_dout, W, 1);
    backend_.attention_backward(acts_.heads_dqkv.get(), heads_dout, a.qkv.get(), a.heads_out.get(),
                                a.attention_state.get(), B_, s.tokens, W / s.size, NH / s.size);
    sequence_to(Layout::kTokens, acts_.heads_dqkv.get(), acts_.dqkv.get(), W, 3);
  }
  using Layout = transformer::SequenceLayout;
  void sequence_to(Layout to, const T* from, T* out, int64_t W, int64_t parts) {
    transformer::sequence_exchange(backend_, to, from, out, B_, cfg_.sequence(), W, parts, "gpt");
  }

  // ---- tensor parallelism (cfg_.tp_size > 1; gpt_params.cc's split)
  bool split() const { return cfg_.tp_size > 1; }
  bool first_part() const { return cfg_.tp_rank == 0; }
  // A replicated bias added to a sum over the group: by its first rank only.
  const T* once(const T* bias) const { return first_part() ? bias : nullptr; }
  // The group's sum in place (nothing without tensor parallelism); a
  // backend without the group's collectives cannot run split.
  void group_sum(T* data, int64_t n) {
    if (split()) transformer::group_sum(backend_, data, n, "gpt");
  }
  // The head over this rank's vocabulary rows; dx null: the loss only.
  double vocab_parallel_head(T* dx, T* dw, const T* w, double grad_scale) {
    return transformer::vocab_parallel_head(backend_, dx, dw, acts_.lnf.get(), w, targets_.get(),
                                            B_ * cfg_.local_tokens(), cfg_.n_embd, vocab_rows_,
                                            vocab_first_, cfg_.vocab_size, grad_scale, "gpt");
  }

  GptConfig cfg_;
  Backend& backend_;
  int64_t lo_, hi_;                   // the blocks this runner keeps activations for
  int64_t vocab_first_, vocab_rows_;  // this rank's rows of wte (all of them unsplit)
  std::vector<std::vector<int64_t>> numels_;
  int64_t B_ = 0;
  Activations acts_;
  bool activations_ready_ = false;
  bool bf16_operands_ = false;  // the form acts_' operand buffers were sized for
  Buffer<int32_t> inputs_, targets_;
  // MoE blocks (moe_mlp.h; host backends only), and d(loss)/d(l_aux) in
  // this pass: the loss scale times moe_loss_coeff.
  static constexpr bool kHostMoe = requires { Backend::kHostMemory; };
  GptMoe<Backend> moe_;
  double aux_grad_ = 0;
};

// Bytes GptRunner::allocate(batch) takes over a backend of these types
// (transformer::runner_allocation_bytes).
template <class Scalar, class Stat>
uint64_t runner_activation_bytes(
    const GptConfig& config, const GptParams& params, int64_t batch, bool bf16_operands,
    transformer::StateElements state_elements = &transformer::cpu::attention_state_elements) {
  return transformer::runner_allocation_bytes<GptRunner, Scalar, Stat>(
      config, params, batch, bf16_operands, state_elements);
}

}  // namespace dscore::gpt
