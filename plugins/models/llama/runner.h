// Llama forward and backward through the host hooks, written once over a
// compute backend (cpu/cpu_backend.h). The runner owns the order of work
// and the activations; a backend owns memory and kernels:
//
//   Scalar, Stat             activation/parameter type; RMSNorm statistics type
//   Buffer<X>, alloc<X>(n)   owning memory of n X; X* get()
//   zero(p, n), copy_tokens(dst, host, n), rope_tables(cos, sin, inv_freq, T)
//   load_params(views, numels) -> params[i] as const Scalar*
//   grads(views, numels)       -> grads[i] as Scalar* (+=); commit() adds them into the views
//   attention_state_elements(B, T, NH): what attention_forward keeps for backward
//   the kernels of cpu/kernels.h and plugins/models/transformer_common/cpu with the same arguments
//
// Every activation size comes from activation_elements (activations.h).
//
// Layers: 0 = embeddings, 1..L = blocks, L+1 = final RMSNorm (+ lm_head
// when untied). A tied LM head needs the embedding after the last block,
// so then layer 0 is acquired twice per pass as in the gpt model: a
// BACKWARD acquire right after the final norm runs the head and its
// gradient (the N x V logits are never all alive), and the last acquire of
// backward adds the embedding gradient and calls grads_ready. An untied
// head runs inside the final layer's backward acquire. Blocks under
// activation checkpointing keep only their input and recompute the rest
// inside their backward acquire. A pipeline stage runs a range of these
// layers (stage_forward/stage_backward) with the same helpers.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/model.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "../transformer_common/counting_backend.h"
#include "../transformer_common/layer_pass.h"
#include "../transformer_common/pass_memory.h"
#include "../transformer_common/tensor_parallel.h"
#include "../transformer_common/tokens.h"
#include "activations.h"
#include "decoder.h"
#include "llama_config.h"
#include "llama_params.h"
#include "moe_mlp.h"
#include "qwen_attention.h"
#include "rope.h"

namespace dscore::llama {

using transformer::backward_block_layers;
using transformer::backward_block_range;
using transformer::backward_layer;
using transformer::backward_layer_grads;
using transformer::forward_block_layers;
using transformer::forward_block_range;
using transformer::forward_layer;
using transformer::GradsReady;
using transformer::SplitTokens;

template <class Backend>
class LlamaRunner {
 public:
  using T = typename Backend::Scalar;
  using S = typename Backend::Stat;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;
  using Decoder = LlamaDecoder<Backend>;  // KV-cached generation (decoder.h)

  // Blocks [lo, hi) (all of them by default: hi < 0): a pipeline stage's
  // runner keeps its own blocks' activations only.
  LlamaRunner(const LlamaConfig& config, const LlamaParams& params, Backend& backend,
              int64_t lo = 0, int64_t hi = -1)
      : cfg_(config),
        backend_(backend),
        lo_(lo),
        hi_(hi < 0 ? config.num_hidden_layers : hi),
        vocab_first_(params.vocab_first()),
        vocab_rows_(params.vocab_rows()),
        inv_freq_(rope_inv_freq(config)),
        qwen_(cfg_, params, backend),
        moe_(cfg_, backend) {
    for (size_t l = 0; l < static_cast<size_t>(config.layer_count()); ++l)
      numels_.push_back(params.layer_numels(l));
  }

  // What the MoE blocks did in the last pass (moe_mlp.h).
  const transformer::moe::PassStats& moe_stats() const { return moe_.stats(); }

  // Mean loss over the counted targets (with output_router_logits, plus
  // router_aux_loss_coef times the MoE blocks' load-balancing loss); adds
  // d(loss_scale * loss)/d(param) into the gradient views.
  double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                          double loss_scale) {
    if (tokens.counted_targets == 0)
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       "llama: the batch has no targets (every token is padding)");
    prepare(tokens);
    aux_grad_ = loss_scale * aux_coefficient();
    forward_blocks(hooks, nullptr);
    const double loss_sum = head_backward(hooks, loss_scale, tokens, GradsReady::kNo);
    blocks_backward(hooks, 0, cfg_.num_hidden_layers);
    embedding_backward(hooks);
    return loss_sum / static_cast<double>(tokens.counted_targets) +
           aux_coefficient() * moe_.stats().aux_loss;
  }

  // ---- pipeline stages (model.h stage_forward/stage_backward): layers
  // [first, end) of embeddings (0), blocks (1..L) and the final RMSNorm
  // with the untied head (L + 1; a tied head reads layer 0 there). The
  // boundary at layer k is the input of layer k, residual(k - 1): (B, T, C)
  // of Scalar.
  int64_t boundary_elements(int64_t batch) const {
    return batch * cfg_.local_tokens() * cfg_.hidden_size;
  }

  void stage_forward(const SplitTokens& tokens, size_t first, size_t end,
                     const dscore_model_hooks& hooks, const T* input, T* output) {
    if (cfg_.has_moe())
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "llama: MoE blocks under pipeline parallelism are not supported yet; "
                       "train MoE with \"pipeline\": {\"stages\": 1}");
    prepare(tokens);
    const int64_t lo = block_of(first), hi = block_of(end);
    const int64_t n = rows() * cfg_.hidden_size;
    // In the stage's first acquire, when the views' dtype is known.
    const auto take_input = [&] {
      ensure_activations();
      backend_.copy_from_host(residual(lo), input, n);
    };
    if (first == 0) embed_forward(hooks);
    forward_block_range(hooks, lo, hi, numels_, backend_, gemm_weights(),
                        [&](int64_t l, const auto& p) {
                          if (l == lo && first > 0) take_input();
                          check_operand_form(p, l);
                          block_forward(l, p, residual(l), residual(l + 1), block_acts(l));
                        });
    if (static_cast<int64_t>(end) == cfg_.layer_count()) {
      final_forward(hooks, nullptr, [&] {
        if (lo == hi && first > 0) take_input();  // a stage of the final layer alone
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
                       "llama: stage_backward of a slot without its stage_forward");
    const int64_t lo = block_of(first), hi = block_of(end);
    const int64_t n = rows() * cfg_.hidden_size;
    double loss_sum = 0;
    if (static_cast<int64_t>(end) == cfg_.layer_count()) {
      if (tokens.counted_targets == 0)
        throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                         "llama: the batch has no targets (every token is padding)");
      // A tied head without the embeddings here: this stage's copy of
      // layer 0 is done with once the head is.
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

  // Forward only: the mean loss over counted targets if `loss` is set, and
  // the logits (B, V) at each sample's last input position into `logits`
  // (host fp32) if non-null.
  void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
               float* logits) {
    prepare(tokens);
    std::vector<int64_t> last_rows;
    for (int64_t b = 0; b < B_; ++b)
      last_rows.push_back(b * cfg_.block_size + tokens.last_position[static_cast<size_t>(b)]);
    const bool want_loss = loss != nullptr && tokens.counted_targets > 0;
    double sum = 0;
    if (cfg_.sequence().split() && logits != nullptr)
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "llama: logits (generation) under sequence parallelism are not supported; "
                       "generate with sequence_parallel_size 1");
    if (split() && logits != nullptr)
      throw sdk::Error(DSCORE_UNIMPLEMENTED,
                       "llama: logits (generation) under tensor parallelism are not supported "
                       "yet; generate with tensor_parallel.autotp_size 1");
    auto head = [&](const T* w) {
      if (split())
        sum = want_loss ? vocab_parallel_head(nullptr, nullptr, w, 0.0) : 0.0;
      else
        sum = backend_.lm_head_forward(acts_.lnf.get(), w, want_loss ? targets_.get() : nullptr,
                                       rows(), cfg_.hidden_size, cfg_.vocab_size, last_rows.data(),
                                       logits != nullptr ? B_ : 0, logits);
    };
    if (cfg_.tie_word_embeddings) {
      forward_blocks(hooks, nullptr);
      forward_layer(hooks, 0, numels_[0], backend_, [&](const auto& p) { head(p[kEmbedTokens]); });
    } else {
      forward_blocks(hooks, head);
    }
    if (loss != nullptr)
      *loss = want_loss ? sum / static_cast<double>(tokens.counted_targets) +
                              aux_coefficient() * moe_.stats().aux_loss
                        : 0.0;
  }

  // Every buffer a pass over `batch` samples uses with operands of that
  // form, allocated once and kept while the batch size and the form stay.
  // The declared activation memory (runner_activation_bytes below) counts
  // these same calls.
  void allocate(int64_t batch, bool bf16_operands) {
    allocate_tokens(batch);
    allocate_activations(bf16_operands);
  }

 private:
  void allocate_tokens(int64_t batch) {
    B_ = batch;
    inputs_ = backend_.template alloc<int32_t>(rows());
    targets_ = backend_.template alloc<int32_t>(rows());
    acts_ = Activations{};
    activations_ready_ = false;
  }

  void allocate_activations(bool bf16_operands) {
    const ActivationElements e =
        activation_elements(cfg_, B_,
                            backend_.attention_state_elements(
                                B_, cfg_.block_size, cfg_.local_heads() / cfg_.sequence().size),
                            bf16_operands, lo_, hi_);
    acts_ = Activations::allocate(backend_, e);
    moe_.allocate(rows(), lo_, hi_);
    bf16_operands_ = bf16_operands;
    activations_ready_ = true;
  }

  // A backend may fuse the block's work (the CPU's does; others run the
  // kernels one by one): the RMSNorms and SwiGLU write their outputs as
  // operands of the linears that read them (rounded to bf16 as written, in
  // bf16 layers: each is rounded once, not once per reader and again for
  // each weight gradient).
  static constexpr bool kFusedBlock = requires(Backend & b, T* t, S* s, const T* c) {
    { b.bf16_compute() } -> std::convertible_to<bool>;
    { b.bf16_operand_for(c) } -> std::convertible_to<bool>;
    b.rmsnorm_forward_operand(t, s, c, c, int64_t{}, int64_t{}, double{}, c);
    b.swiglu_forward_operand(t, c, c, int64_t{}, c);
    b.matmul_forward_operand(t, c, c, c, int64_t{}, int64_t{}, int64_t{});
    b.matmul_backward_operand(t, t, t, c, c, c, int64_t{}, int64_t{}, int64_t{}, bool{});
    b.mlp_backward(t, t, t, t, t, t, c, c, c, c, c, c, c, c, int64_t{}, int64_t{}, int64_t{});
  };

  // In the first layer's acquire, when the views' dtype is known: the
  // activations, (re)made when the batch or the operands' form changed.
  void ensure_activations() {
    bool bf16 = false;
    if constexpr (kFusedBlock) bf16 = backend_.bf16_compute();
    if (activations_ready_ && bf16 == bf16_operands_) return;
    allocate_activations(bf16);
    backend_.rope_tables(acts_.rope_cos.get(), acts_.rope_sin.get(), inv_freq_, cfg_.block_size);
  }
  // The operand buffers were sized for one form: a block of the other (its
  // weights of another dtype than the embeddings') would overrun them.
  template <class P>
  void check_operand_form(const P& p, int64_t l) const {
    if constexpr (kFusedBlock) {
      for (size_t reader : {kQProj, kGateProj, kDownProj}) {
        if (reader != kQProj && cfg_.moe_block(l)) continue;  // no such linears
        transformer::check_operand_form("llama", l, backend_.bf16_operand_for(p[reader]),
                                        bf16_operands_);
      }
    }
  }

  using BlockActs = typename ActivationBuffers<Backend>::Block;
  using Activations = ActivationBuffers<Backend>;

  int64_t rows() const { return B_ * cfg_.local_tokens(); }
  bool checkpointed(int64_t l) const { return l < cfg_.checkpoint_blocks; }
  BlockActs& block_acts(int64_t l) {
    return checkpointed(l)
               ? acts_.blocks.back()
               : acts_.blocks[static_cast<size_t>(l - std::max(lo_, cfg_.checkpoint_blocks))];
  }
  // Block l's input (residual(l + 1) its output), for blocks lo_ .. hi_.
  T* residual(int64_t l) const { return acts_.resid.get() + (l - lo_) * rows() * cfg_.hidden_size; }
  // The block a layer index starts at (layer l + 1 is block l), clamped to
  // the blocks.
  int64_t block_of(size_t layer) const {
    return std::clamp<int64_t>(static_cast<int64_t>(layer) - 1, 0, cfg_.num_hidden_layers);
  }

  // The LM head and its gradient (through layer 0 when tied, with
  // grads_ready as embedding_ready says), then the final RMSNorm's backward
  // (the untied head inside its acquire): dresid holds the gradient at the
  // last block's output. Returns the loss summed over counted targets.
  double head_backward(const dscore_model_hooks& hooks, double loss_scale,
                       const SplitTokens& tokens, GradsReady embedding_ready) {
    const int64_t N = rows(), C = cfg_.hidden_size;
    const double grad_scale = loss_scale / static_cast<double>(tokens.counted_targets);
    double loss_sum = 0;
    auto head = [&](const T* w, T* dw) {
      loss_sum = split() ? vocab_parallel_head(acts_.dlnf.get(), dw, w, grad_scale)
                         : backend_.lm_head_forward_backward(acts_.dlnf.get(), dw, acts_.lnf.get(),
                                                             w, targets_.get(), N, C,
                                                             cfg_.vocab_size, grad_scale);
    };
    // The vocabulary-parallel head reads fp32 rows: its weights are converted.
    const std::vector<bool>* head_weights = split() ? nullptr : &embedding_gemm_weights();
    if (cfg_.tie_word_embeddings)  // the head's gradient, first part of the embedding's
      backward_layer(
          hooks, 0, numels_[0], backend_, embedding_ready,
          [&](const auto& p, auto& g) { head(p[kEmbedTokens], g[kEmbedTokens]); }, head_weights);
    const size_t final_layer = static_cast<size_t>(cfg_.final_layer());
    const std::vector<bool>* final_weights =
        split() || cfg_.tie_word_embeddings ? nullptr : &final_gemm_weights();
    backward_layer(
        hooks, final_layer, numels_[final_layer], backend_, GradsReady::kYes,
        [&](const auto& p, auto& g) {  // final RMSNorm (and the untied head)
          if (!cfg_.tie_word_embeddings) head(p[kLmHead], g[kLmHead]);
          T* d = acts_.dresid.get();
          backend_.zero(d, N * C);
          backend_.rmsnorm_backward(d, g[kFinalNorm], acts_.dlnf.get(), residual(hi_),
                                    p[kFinalNorm], acts_.lnf_rstd.get(), N, C);
        },
        final_weights);
    return loss_sum;
  }
  // Blocks [lo, hi) backward from dresid (the gradient at block hi - 1's
  // output), leaving the gradient at block lo's input there.
  void blocks_backward(const dscore_model_hooks& hooks, int64_t lo, int64_t hi) {
    backward_block_range(hooks, lo, hi, numels_, backend_, gemm_weights(),
                         [&](int64_t l, const auto& p, auto& g) {
                           BlockActs& a = block_acts(l);
                           if (checkpointed(l))
                             block_forward(l, p, residual(l), nullptr, a);  // recompute
                           block_backward(l, p, g, residual(l), a, acts_.dresid.get());
                         });
  }
  // The input side of the embedding's gradient from dresid, then
  // grads_ready.
  void embedding_backward(const dscore_model_hooks& hooks) {
    backward_layer_grads(hooks, 0, numels_[0], backend_, GradsReady::kYes, [&](auto& g) {
      if (!split()) {
        backend_.embedding_backward(g[kEmbedTokens], acts_.dresid.get(), inputs_.get(), rows(),
                                    cfg_.hidden_size);
      } else if constexpr (requires {
                             backend_.embedding_backward_part(g[kEmbedTokens], nullptr, nullptr, 0,
                                                              0, 0, 0);
                           }) {
        backend_.embedding_backward_part(g[kEmbedTokens], acts_.dresid.get(), inputs_.get(), rows(),
                                         cfg_.hidden_size, vocab_first_, vocab_rows_);
      } else {
        transformer::cpu_only("llama");
      }
    });
  }

  // Tokens into backend memory (their buffers made anew when B changes).
  void prepare(const SplitTokens& tokens) {
    if (tokens.batch != B_) allocate_tokens(tokens.batch);  // activations: ensure_activations
    moe_.begin_pass(tokens.inputs);
    backend_.copy_tokens(inputs_.get(), tokens.inputs.data(), rows());
    backend_.copy_tokens(targets_.get(), tokens.targets.data(), rows());
  }

  transformer::cpu::AttentionShape attention_shape() const {
    const int64_t Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim();
    return {
        B_, cfg_.local_tokens(), cfg_.local_heads(), cfg_.local_kv_heads(), cfg_.head_dim, Q, KV,
        Q};
  }

  // The embeddings, every block, and the final norm; `final_head`, when
  // set, runs with the final layer's parameters still acquired (forward
  // only, untied head).
  template <class Head>
  void forward_blocks(const dscore_model_hooks& hooks, const Head& final_head) {
    embed_forward(hooks);
    forward_block_layers(hooks, cfg_.num_hidden_layers, numels_, backend_, gemm_weights(),
                         [&](int64_t l, const auto& p) {
                           check_operand_form(p, l);
                           block_forward(l, p, residual(l), residual(l + 1), block_acts(l));
                         });
    moe_.finish_forward();
    final_forward(hooks, final_head);
  }
  void embed_forward(const dscore_model_hooks& hooks) {
    forward_layer(
        hooks, 0, numels_[0], backend_,
        [&](const auto& p) {
          ensure_activations();
          if (!split()) {
            backend_.embedding_forward(residual(0), inputs_.get(), p[kEmbedTokens], rows(),
                                       cfg_.hidden_size);
          } else if constexpr (requires {
                                 backend_.embedding_forward_part(nullptr, nullptr, p[kEmbedTokens],
                                                                 0, 0, 0, 0);
                               }) {
            // Each rank embeds the tokens of its vocabulary rows; the group's
            // sum is the embedding.
            backend_.embedding_forward_part(residual(0), inputs_.get(), p[kEmbedTokens], rows(),
                                            cfg_.hidden_size, vocab_first_, vocab_rows_);
            group_sum(residual(0), rows() * cfg_.hidden_size);
          } else {
            transformer::cpu_only("llama");
          }
        },
        &embedding_gemm_weights());  // looked up from the bf16 view: not converted
  }
  // The final RMSNorm over the last block's output; prologue: runs first
  // inside the layer's acquire.
  template <class Head>
  void final_forward(const dscore_model_hooks& hooks, const Head& final_head,
                     const std::function<void()>& prologue = {}) {
    const size_t l = static_cast<size_t>(cfg_.final_layer());
    forward_layer(hooks, l, numels_[l], backend_, [&](const auto& p) {
      if (prologue) prologue();
      backend_.rmsnorm_forward(acts_.lnf.get(), acts_.lnf_rstd.get(), residual(hi_), p[kFinalNorm],
                               rows(), cfg_.hidden_size, cfg_.rms_norm_eps);
      if constexpr (!std::is_same_v<Head, std::nullptr_t>) final_head(p[kLmHead]);
    });
  }

  // x: the block's input; out: its output (null when recomputing: only the
  // activations are wanted, the output already exists).
  template <class P>
  void block_forward(int64_t l, const P& p, const T* x, T* out, BlockActs& a) {
    // This rank's heads and units (all of them without tensor parallelism).
    const int64_t N = rows(), C = cfg_.hidden_size, I = cfg_.local_intermediate();
    const int64_t Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim(), hd = cfg_.head_dim,
                  Tn = cfg_.local_tokens();
    const double eps = cfg_.rms_norm_eps;
    if constexpr (kFusedBlock) {
      backend_.rmsnorm_forward_operand(a.ln1.get(), a.rstd1.get(), x, p[kInputNorm], N, C, eps,
                                       p[kQProj]);
      backend_.matmul_forward_operand(q_proj_out(a), a.ln1.get(), p[kQProj], qwen_.bias(l, p, 0), N,
                                      C, Q);
      backend_.matmul_forward_operand(k_proj_out(a), a.ln1.get(), p[kKProj], qwen_.bias(l, p, 1), N,
                                      C, KV);
      backend_.matmul_forward_operand(v_out(a), a.ln1.get(), p[kVProj], qwen_.bias(l, p, 2), N, C,
                                      KV);
    } else {
      backend_.rmsnorm_forward(a.ln1.get(), a.rstd1.get(), x, p[kInputNorm], N, C, eps);
      backend_.matmul_forward(q_proj_out(a), a.ln1.get(), p[kQProj], qwen_.bias(l, p, 0), N, C, Q);
      backend_.matmul_forward(k_proj_out(a), a.ln1.get(), p[kKProj], qwen_.bias(l, p, 1), N, C, KV);
      backend_.matmul_forward(v_out(a), a.ln1.get(), p[kVProj], qwen_.bias(l, p, 2), N, C, KV);
    }
    if (cfg_.qk_norm())
      qwen_.norm_forward(l, p, N, a.q_pre.get(), a.k_pre.get(), q_out(a), k_out(a),
                         a.head_rstd.get());
    // RoPE at this rank's positions (its slice's rows of the tables).
    const T* cos = rope_rows(acts_.rope_cos.get());
    const T* sin = rope_rows(acts_.rope_sin.get());
    backend_.rope_forward(q_out(a), cos, sin, B_, Tn, cfg_.local_heads(), hd, Q);
    backend_.rope_forward(k_out(a), cos, sin, B_, Tn, cfg_.local_kv_heads(), hd, KV);
    if (cfg_.sequence().split())
      sequence_attention_forward(a);
    else
      backend_.attention_forward(a.atty.get(), a.attention_state.get(), a.q.get(), a.k.get(),
                                 a.v.get(), attention_shape());
    if constexpr (kFusedBlock) {
      // o_proj goes through dln (backward scratch, free here: a recompute
      // runs before its block's backward uses it), as ln2 is written in
      // another form than o_proj's output.
      T* o = acts_.dln.get();
      backend_.matmul_forward(o, a.atty.get(), p[kOProj], nullptr, N, Q, C);
      group_sum(o, N * C);
      backend_.add(a.x2.get(), x, o, N * C);
      if (cfg_.moe_block(l)) return moe_block_forward(l, p, out, a);
      backend_.rmsnorm_forward_operand(a.ln2.get(), a.rstd2.get(), a.x2.get(),
                                       p[kPostAttentionNorm], N, C, eps, p[kGateProj]);
      backend_.matmul_forward_operand(a.gate.get(), a.ln2.get(), p[kGateProj], nullptr, N, C, I);
      backend_.matmul_forward_operand(a.up.get(), a.ln2.get(), p[kUpProj], nullptr, N, C, I);
      backend_.swiglu_forward_operand(a.swiglu.get(), a.gate.get(), a.up.get(), N * I,
                                      p[kDownProj]);
      if (out == nullptr) return;
      backend_.matmul_forward_operand(out, a.swiglu.get(), p[kDownProj], nullptr, N, I, C);
    } else {
      // o_proj goes through ln2's buffer (overwritten next).
      backend_.matmul_forward(a.ln2.get(), a.atty.get(), p[kOProj], nullptr, N, Q, C);
      group_sum(a.ln2.get(), N * C);
      backend_.add(a.x2.get(), x, a.ln2.get(), N * C);
      if (cfg_.moe_block(l)) return moe_block_forward(l, p, out, a);
      backend_.rmsnorm_forward(a.ln2.get(), a.rstd2.get(), a.x2.get(), p[kPostAttentionNorm], N, C,
                               eps);
      backend_.matmul_forward(a.gate.get(), a.ln2.get(), p[kGateProj], nullptr, N, C, I);
      backend_.matmul_forward(a.up.get(), a.ln2.get(), p[kUpProj], nullptr, N, C, I);
      backend_.swiglu_forward(a.swiglu.get(), a.gate.get(), a.up.get(), N * I);
      if (out == nullptr) return;
      backend_.matmul_forward(out, a.swiglu.get(), p[kDownProj], nullptr, N, I, C);
    }
    group_sum(out, N * C);
    backend_.add(out, out, a.x2.get(), N * C);
  }

  // Qwen3's q_norm and k_norm: q_proj and k_proj write q_pre and k_pre,
  // normalised into q_out and k_out before RoPE (qwen_attention.h).
  T* q_proj_out(BlockActs& a) { return cfg_.qk_norm() ? a.q_pre.get() : q_out(a); }
  T* k_proj_out(BlockActs& a) { return cfg_.qk_norm() ? a.k_pre.get() : k_out(a); }

  // An MoE block's MLP (moe_mlp.h) after its attention: the
  // post-attention RMSNorm into the MLP's input, the experts, the residual.
  template <class P>
  void moe_block_forward(int64_t l, const P& p, T* out, BlockActs& a) {
    if constexpr (kHostMoe) {
      const int64_t N = rows(), C = cfg_.hidden_size;
      backend_.rmsnorm_forward(moe_.input(l), a.rstd2.get(), a.x2.get(), p[kPostAttentionNorm], N,
                               C, cfg_.rms_norm_eps);
      moe_.forward(l, p, out, /*recompute=*/out == nullptr);
      if (out != nullptr) backend_.add(out, out, a.x2.get(), N * C);
    } else {
      (void)l, (void)p, (void)out, (void)a;
      transformer::cpu_only("llama");
    }
  }

  // A linear's backward whose input `inp` its forward read as an operand
  // buffer (kFusedBlock), else as plain activations.
  void input_linear_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                             int64_t C, int64_t OC, bool accumulate_dinp = false) {
    if constexpr (kFusedBlock) {
      backend_.matmul_backward_operand(dinp, dw, db, dout, inp, w, rows(), C, OC, accumulate_dinp);
    } else {
      backend_.matmul_backward(dinp, dw, db, dout, inp, w, rows(), C, OC, accumulate_dinp);
    }
  }

  // d: the gradient at the block's output on entry, at its input on return.
  template <class P, class G>
  void block_backward(int64_t l, const P& p, G& g, const T* x, const BlockActs& a, T* d) {
    // This rank's heads and units (all of them without tensor parallelism).
    const int64_t N = rows(), C = cfg_.hidden_size, I = cfg_.local_intermediate();
    const int64_t Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim(), hd = cfg_.head_dim,
                  Tn = cfg_.local_tokens();
    if (cfg_.moe_block(l)) {
      if constexpr (kHostMoe)
        moe_.backward(l, p, g, d, acts_.dln.get(), aux_grad_);
      else
        transformer::cpu_only("llama");
    } else if constexpr (kFusedBlock) {
      backend_.mlp_backward(acts_.dln.get(), g[kGateProj], g[kUpProj], g[kDownProj],
                            acts_.dgate.get(), acts_.dup.get(), d, a.ln2.get(), a.gate.get(),
                            a.up.get(), a.swiglu.get(), p[kGateProj], p[kUpProj], p[kDownProj], N,
                            C, I);
    } else {
      T* dswiglu = acts_.dgate.get();  // d(swiglu), then d(gate) in place
      backend_.matmul_backward(dswiglu, g[kDownProj], nullptr, d, a.swiglu.get(), p[kDownProj], N,
                               I, C);
      backend_.swiglu_backward(acts_.dgate.get(), acts_.dup.get(), dswiglu, a.gate.get(),
                               a.up.get(), N * I);
      backend_.matmul_backward(acts_.dln.get(), g[kGateProj], nullptr, acts_.dgate.get(),
                               a.ln2.get(), p[kGateProj], N, C, I);
      backend_.matmul_backward(acts_.dln.get(), g[kUpProj], nullptr, acts_.dup.get(), a.ln2.get(),
                               p[kUpProj], N, C, I, true);
    }
    group_sum(acts_.dln.get(), N * C);
    backend_.rmsnorm_backward(d, g[kPostAttentionNorm], acts_.dln.get(), a.x2.get(),
                              p[kPostAttentionNorm], a.rstd2.get(), N, C);
    backend_.matmul_backward(acts_.datty.get(), g[kOProj], nullptr, d, a.atty.get(), p[kOProj], N,
                             Q, C);
    if (cfg_.sequence().split())
      sequence_attention_backward(a);
    else
      backend_.attention_backward(acts_.dq.get(), acts_.dk.get(), acts_.dv.get(), acts_.datty.get(),
                                  a.q.get(), a.k.get(), a.v.get(), a.atty.get(),
                                  a.attention_state.get(), attention_shape());
    const T* cos = rope_rows(acts_.rope_cos.get());
    const T* sin = rope_rows(acts_.rope_sin.get());
    backend_.rope_backward(acts_.dq.get(), cos, sin, B_, Tn, cfg_.local_heads(), hd, Q);
    backend_.rope_backward(acts_.dk.get(), cos, sin, B_, Tn, cfg_.local_kv_heads(), hd, KV);
    const T* dq = acts_.dq.get();  // at q_proj's output
    const T* dk = acts_.dk.get();
    if (cfg_.qk_norm()) {
      qwen_.norm_backward(l, p, g, N, acts_.dq.get(), acts_.dk.get(), a.q_pre.get(), a.k_pre.get(),
                          a.head_rstd.get(), acts_.dq_pre.get(), acts_.dk_pre.get());
      dq = acts_.dq_pre.get();
      dk = acts_.dk_pre.get();
    }
    input_linear_backward(acts_.dln.get(), g[kQProj], qwen_.bias_grad(l, g, 0), dq, a.ln1.get(),
                          p[kQProj], C, Q);
    input_linear_backward(acts_.dln.get(), g[kKProj], qwen_.bias_grad(l, g, 1), dk, a.ln1.get(),
                          p[kKProj], C, KV, true);
    input_linear_backward(acts_.dln.get(), g[kVProj], qwen_.bias_grad(l, g, 2), acts_.dv.get(),
                          a.ln1.get(), p[kVProj], C, KV, true);
    group_sum(acts_.dln.get(), N * C);
    backend_.rmsnorm_backward(d, g[kInputNorm], acts_.dln.get(), x, p[kInputNorm], a.rstd1.get(), N,
                              C);
  }

  // ---- sequence parallelism (cfg_.sp_size > 1; sequence_parallel.h):
  // the projections write this rank's slice of q, k and v to the backward
  // scratch dq, dk and dv (free in forward); RoPE turns them at the slice's
  // positions; all-to-alls move them to a.q, a.k and a.v in the heads
  // layout (the whole sequence, 1 / sp of the query and key/value heads),
  // which attention reads and backward keeps.
  T* q_out(BlockActs& a) { return cfg_.sequence().split() ? acts_.dq.get() : a.q.get(); }
  T* k_out(BlockActs& a) { return cfg_.sequence().split() ? acts_.dk.get() : a.k.get(); }
  T* v_out(BlockActs& a) { return cfg_.sequence().split() ? acts_.dv.get() : a.v.get(); }
  const T* rope_rows(const T* table) const {
    return table + cfg_.sequence().first() * (cfg_.head_dim / 2);
  }
  transformer::cpu::AttentionShape heads_shape() const {
    const int64_t sp = cfg_.sequence().size;
    const int64_t Q = cfg_.local_q_dim() / sp, KV = cfg_.local_kv_dim() / sp;
    return {B_,
            cfg_.block_size,
            cfg_.local_heads() / sp,
            cfg_.local_kv_heads() / sp,
            cfg_.head_dim,
            Q,
            KV,
            Q};
  }
  void sequence_attention_forward(BlockActs& a) {
    const int64_t Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim();
    sequence_to(Layout::kHeads, acts_.dq.get(), a.q.get(), Q);
    sequence_to(Layout::kHeads, acts_.dk.get(), a.k.get(), KV);
    sequence_to(Layout::kHeads, acts_.dv.get(), a.v.get(), KV);
    backend_.attention_forward(a.heads_out.get(), a.attention_state.get(), a.q.get(), a.k.get(),
                               a.v.get(), heads_shape());
    sequence_to(Layout::kTokens, a.heads_out.get(), a.atty.get(), Q);
  }
  // From the gradient at a.atty (acts_.datty) to the slice's q, k and v
  // gradients (acts_.dq, dk, dv), through acts_.heads_grad.
  void sequence_attention_backward(const BlockActs& a) {
    const int64_t Q = cfg_.local_q_dim(), KV = cfg_.local_kv_dim(), N = rows();
    T* dout = acts_.heads_grad.get();
    T* dq = dout + N * Q;
    T* dk = dq + N * Q;
    T* dv = dk + N * KV;
    sequence_to(Layout::kHeads, acts_.datty.get(), dout, Q);
    backend_.attention_backward(dq, dk, dv, dout, a.q.get(), a.k.get(), a.v.get(),
                                a.heads_out.get(), a.attention_state.get(), heads_shape());
    sequence_to(Layout::kTokens, dq, acts_.dq.get(), Q);
    sequence_to(Layout::kTokens, dk, acts_.dk.get(), KV);
    sequence_to(Layout::kTokens, dv, acts_.dv.get(), KV);
  }
  using Layout = transformer::SequenceLayout;
  void sequence_to(Layout to, const T* from, T* out, int64_t W) {
    transformer::sequence_exchange(backend_, to, from, out, B_, cfg_.sequence(), W, 1, "llama");
  }

  // ---- tensor parallelism (cfg_.tp_size > 1; llama_params.cc's split):
  // the split linears' outputs (o_proj, down_proj) and input gradients
  // (q/k/v, gate/up) are this rank's part of a sum, made whole by the
  // group's sum; the RMSNorm weights' gradients come out equal on every rank.
  bool split() const { return cfg_.tp_size > 1; }
  void group_sum(T* data, int64_t n) {
    if (split()) transformer::group_sum(backend_, data, n, "llama");
  }
  // The head over this rank's vocabulary rows; dx null: the loss only.
  double vocab_parallel_head(T* dx, T* dw, const T* w, double grad_scale) {
    return transformer::vocab_parallel_head(backend_, dx, dw, acts_.lnf.get(), w, targets_.get(),
                                            rows(), cfg_.hidden_size, vocab_rows_, vocab_first_,
                                            cfg_.vocab_size, grad_scale, "llama");
  }

  // MoE blocks (moe_mlp.h; host backends only), and d(loss)/d(the
  // load-balancing loss) in this pass: the loss scale times its coefficient.
  static constexpr bool kHostMoe = requires { Backend::kHostMemory; };
  // Which of block l's parameters its linears read as weights (an MoE
  // block's experts read fp32 copies).
  auto gemm_weights() const {
    return [this](int64_t l) -> const std::vector<bool>& {
      return block_gemm_weights(cfg_.moe_block(l));
    };
  }
  double aux_coefficient() const {
    return cfg_.output_router_logits ? cfg_.router_aux_loss_coef : 0.0;
  }

  LlamaConfig cfg_;
  Backend& backend_;
  int64_t lo_, hi_;                   // the blocks this runner keeps activations for
  int64_t vocab_first_, vocab_rows_;  // this rank's rows of the embedding and head
  std::vector<double> inv_freq_;
  std::vector<std::vector<int64_t>> numels_;
  int64_t B_ = 0;
  Activations acts_;
  bool activations_ready_ = false;
  bool bf16_operands_ = false;  // the form acts_' operand buffers were sized for
  Buffer<int32_t> inputs_, targets_;
  QwenAttention<Backend> qwen_;
  LlamaMoe<Backend> moe_;
  double aux_grad_ = 0;
};

// Bytes LlamaRunner::allocate(batch) takes over a backend of these types
// (transformer::runner_allocation_bytes).
template <class Scalar, class Stat>
uint64_t runner_activation_bytes(
    const LlamaConfig& config, const LlamaParams& params, int64_t batch, bool bf16_operands,
    transformer::StateElements state_elements = &transformer::cpu::attention_state_elements) {
  return transformer::runner_allocation_bytes<LlamaRunner, Scalar, Stat>(
      config, params, batch, bf16_operands, state_elements);
}

}  // namespace dscore::llama
