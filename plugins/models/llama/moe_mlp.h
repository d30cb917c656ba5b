// The llama's MoE blocks' MLP (LlamaConfig::moe_block), transformers'
// MixtralSparseMoeBlock on one rank: the router's logits from the
// post-attention RMSNorm's output, dropless top-k routing
// (transformer_common/moe/gating.h), the routes packed expert by expert
// (moe/dispatch.h), each expert's SwiGLU over its rows, and the weighted
// combine; Qwen2-MoE adds a shared expert's SwiGLU of every token, scaled
// by sigmoid(x shared_expert_gate). Under expert parallelism (ep_size > 1)
// this rank holds E / ep_size of the experts: the packed rows go to their
// experts' ranks and come back through an ExpertExchange
// (transformer_common/moe/expert_exchange.h), as the gpt's do. Backward
// runs the same in reverse and adds the router's gradient
// from the combine weights and, with output_router_logits, from
// router_aux_loss_coef times the load-balancing loss.
//
// That loss is transformers' load_balancing_loss_func: over the routes of
// every MoE block of the pass together, E * sum_e f_e * P_e, with f_e the
// share of all blocks' routes that went to expert e and P_e the mean
// router probability of expert e over all blocks' tokens. It couples the
// blocks, so it is known once forward has routed them all (finish_forward),
// and each block's backward reads the shares f.
//
// Host memory only (the CPU backend: T float, or double in the gradient
// checks); the llama refuses MoE on CUDA. Buffers come from the backend's
// alloc, so the declared activation memory counts them: per MoE block its
// kept activations (k rows per token), and one set of backward scratch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "../transformer_common/cpu/linear.h"
#include "../transformer_common/moe/dispatch.h"
#include "../transformer_common/moe/expert_exchange.h"
#include "../transformer_common/moe/expert_group.h"
#include "../transformer_common/moe/gating.h"
#include "../transformer_common/moe/stats.h"
#include "llama_config.h"
#include "llama_params.h"

namespace dscore::llama {

template <class Backend>
class LlamaMoe {
 public:
  using T = typename Backend::Scalar;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;

  LlamaMoe(const LlamaConfig& config, Backend& backend)
      : cfg_(config), gating_(config.gating()), backend_(backend) {}

  // Buffers for N tokens, for the MoE blocks among [lo, hi).
  void allocate(int64_t N, int64_t lo, int64_t hi) {
    N_ = N;
    first_ = lo;
    blocks_.clear();
    if (!cfg_.has_moe()) return;
    const int64_t C = cfg_.hidden_size, I = cfg_.expert_width(), R = gating_.k * N;
    for (int64_t l = lo; l < hi; ++l) {
      blocks_.emplace_back();
      if (!cfg_.moe_block(l)) continue;
      Block& b = blocks_.back();
      b.ln = alloc(N * C);
      b.x = alloc(R * C);
      b.gate = alloc(R * I);
      b.up = alloc(R * I);
      b.act = alloc(R * I);
      b.y = alloc(R * C);
      if (shared_width() > 0) {
        const int64_t S = shared_width();
        b.shared_gate = alloc(N * S);
        b.shared_up = alloc(N * S);
        b.shared_act = alloc(N * S);
        b.shared_out = alloc(N * C);
        b.shared_scale = alloc(N);
      }
    }
    if (shared_width() > 0) {
      scratch_.dshared = alloc(N * C);
      scratch_.dshared_gate = alloc(N * shared_width());
      scratch_.dshared_up = alloc(N * shared_width());
      scratch_.dscale = alloc(N);
    }
    scratch_.logits = alloc(N * gating_.num_experts);
    scratch_.dweight = alloc(R);
    scratch_.drows = alloc(R * C);
    scratch_.dgate = alloc(R * I);
    scratch_.dup = alloc(R * I);
    // Under expert parallelism this rank's experts' rows in and out: as
    // many as its own routes when they are balanced; an imbalanced pass
    // grows them (fit).
    if (spread()) {
      for (Block& b : blocks_)
        if (b.x.get() != nullptr) b.xe = alloc(R * C), b.ye = alloc(R * C);
      scratch_.dexperts = alloc(R * C);
    }
  }

  // Where block l's post-attention RMSNorm writes its output (the MLP's input).
  T* input(int64_t l) { return block(l).ln.get(); }

  // A new pass over these input tokens (-1: padding, whose routes count
  // in neither the load-balancing loss nor the loads, as transformers'
  // attention_mask leaves them out): the statistics restart.
  void begin_pass(const std::vector<int32_t>& inputs) {
    padding_.assign(inputs.size(), 0);
    for (size_t i = 0; i < inputs.size(); ++i) padding_[i] = inputs[i] < 0 ? 1 : 0;
    const auto E = static_cast<size_t>(gating_.num_experts);
    stats_ = transformer::moe::PassStats{};
    stats_.load.assign(E, 0);
    probability_sum_.assign(E, 0.0);
    rows_ = 0;
  }
  const transformer::moe::PassStats& stats() const { return stats_; }

  // Block l's MLP on input(l) into out (N x C, overwritten); out null: only
  // the activations (a checkpointed block's recomputation: the same routes).
  template <class P>
  void forward(int64_t l, const P& p, T* out, bool recompute) {
    namespace moe = transformer::moe;
    Block& b = block(l);
    const int64_t N = N_, C = cfg_.hidden_size, I = cfg_.expert_width(), E = gating_.num_experts;
    T* logits = scratch_.logits.get();
    transformer::cpu::matmul_forward(logits, b.ln.get(), p[kRouter], kBias, N, C, E);
    b.routing = moe::route<T>(gating_, logits, N, /*training=*/true, moe::GatingNoise{});
    b.packing = moe::pack(b.routing);
    if (!recompute) count(b.routing);
    moe::gather_rows(b.x.get(), b.ln.get(), b.packing, C);
    const T* xe = b.x.get();
    if (spread()) {
      b.exchange.emplace(b.packing, E, static_cast<int>(cfg_.ep_size),
                         static_cast<int>(cfg_.ep_rank), group().counts());
      const int64_t Re = b.exchange->expert_rows();
      fit(b.xe, Re * C);
      fit(b.ye, Re * C);
      fit(b.gate, Re * I);
      fit(b.up, Re * I);
      fit(b.act, Re * I);
      b.exchange->dispatch(b.x.get(), b.xe.get(), C, group().template rows<T>());
      xe = b.xe.get();
      stats_.exchanged_bytes += b.exchange->counts_bytes() + exchanged(*b.exchange);
    }
    // Expert j of those this rank holds, over its rows.
    for_each_expert(b, [&](int64_t j, int64_t r0, int64_t n) {
      const T* x = xe + r0 * C;
      linear(b.gate.get() + r0 * I, x, p[expert_param(j, kW1)], n, C, I);
      linear(b.up.get() + r0 * I, x, p[expert_param(j, kW3)], n, C, I);
    });
    const int64_t Re = expert_rows(b).back();
    backend_.swiglu_forward(b.act.get(), b.gate.get(), b.up.get(), Re * I);
    T* ye = spread() ? b.ye.get() : b.y.get();
    for_each_expert(b, [&](int64_t j, int64_t r0, int64_t n) {
      linear(ye + r0 * C, b.act.get() + r0 * I, p[expert_param(j, kW2)], n, I, C);
    });
    if (spread()) b.exchange->combine(ye, b.y.get(), C, group().template rows<T>());
    if (out != nullptr) moe::combine(out, b.y.get(), b.routing, b.packing, C);
    if (shared_width() > 0) shared_forward(b, p, out);
  }

  // After every MoE block's forward: the load-balancing loss of the pass
  // (stats().aux_loss) and each expert's share of the routes, which its
  // gradient reads.
  void finish_forward() {
    const auto E = static_cast<size_t>(gating_.num_experts);
    route_share_.assign(E, 0.0);
    if (rows_ == 0) return;
    const double rows = static_cast<double>(rows_);
    double loss = 0;
    for (size_t e = 0; e < E; ++e) {
      route_share_[e] = static_cast<double>(stats_.load[e]) / rows;
      loss += route_share_[e] * probability_sum_[e] / rows;
    }
    stats_.aux_loss = static_cast<double>(E) * loss;
  }

  // From dout (N x C, the gradient at the MLP's output): the gradient at
  // its input into dln (overwritten) and the block's parameters' gradients
  // added into g. aux_grad: d(loss) / d(load-balancing loss).
  template <class P, class G>
  void backward(int64_t l, const P& p, G& g, const T* dout, T* dln, double aux_grad) {
    namespace moe = transformer::moe;
    Block& b = block(l);
    const int64_t N = N_, C = cfg_.hidden_size, I = cfg_.expert_width(), E = gating_.num_experts;
    backend_.zero(dln, N * C);
    if (shared_width() > 0) shared_backward(b, p, g, dout, dln);
    T* drows = scratch_.drows.get();
    T* dweight = scratch_.dweight.get();
    moe::combine_backward(drows, dweight, dout, b.y.get(), b.routing, b.packing, C);
    // The experts' rows: this rank's packing, or under expert parallelism
    // the rows the group sent this rank's experts (their dy out the way
    // the outputs came back, their dx back the way the inputs went).
    const int64_t Re = expert_rows(b).back();
    if (spread()) {
      fit(scratch_.dexperts, Re * C);
      fit(scratch_.dgate, Re * I);
      fit(scratch_.dup, Re * I);
    }
    T* de = spread() ? scratch_.dexperts.get() : drows;
    if (spread()) b.exchange->dispatch(drows, de, C, group().template rows<T>());
    const T* xe = spread() ? b.xe.get() : b.x.get();
    T* dgate = scratch_.dgate.get();  // d(act), then d(gate) in place
    T* dup = scratch_.dup.get();
    for_each_expert(b, [&](int64_t j, int64_t r0, int64_t n) {
      transformer::cpu::matmul_backward(dgate + r0 * I, g[expert_param(j, kW2)], kNoBias,
                                        de + r0 * C, b.act.get() + r0 * I, p[expert_param(j, kW2)],
                                        n, I, C);
    });
    backend_.swiglu_backward(dgate, dup, dgate, b.gate.get(), b.up.get(), Re * I);
    for_each_expert(b, [&](int64_t j, int64_t r0, int64_t n) {
      // de (the rows' dy) is done with: it takes the rows' input gradients.
      const T* x = xe + r0 * C;
      transformer::cpu::matmul_backward(de + r0 * C, g[expert_param(j, kW1)], kNoBias,
                                        dgate + r0 * I, x, p[expert_param(j, kW1)], n, C, I);
      transformer::cpu::matmul_backward(de + r0 * C, g[expert_param(j, kW3)], kNoBias, dup + r0 * I,
                                        x, p[expert_param(j, kW3)], n, C, I,
                                        /*accumulate_dinp=*/true);
    });
    if (spread()) {
      b.exchange->combine(de, drows, C, group().template rows<T>());
      stats_.exchanged_bytes += exchanged(*b.exchange);
    }
    moe::scatter_add_rows(dln, drows, b.packing, C);
    // The router, from the combine weights and the load-balancing loss:
    // d loss / d probability[s, e] = E f_e / rows (route_backward divides
    // by this block's tokens).
    const double per_block =
        static_cast<double>(N) / static_cast<double>(std::max<int64_t>(1, rows_));
    for (int64_t e = 0; e < E; ++e)
      b.routing.load_fraction[static_cast<size_t>(e)] =
          static_cast<double>(E) * route_share_[static_cast<size_t>(e)] * per_block;
    T* dlogits = scratch_.logits.get();
    moe::route_backward<T>(gating_, b.routing, dweight, aux_grad, dlogits);
    // A padding token's output reaches no loss (causal attention, no
    // target): its router gradient was the aux loss's alone, which leaves it out.
    for (int64_t s = 0; s < N; ++s)
      if (padding_[static_cast<size_t>(s)] != 0) backend_.zero(dlogits + s * E, E);
    transformer::cpu::matmul_backward(dln, g[kRouter], kNoBias, dlogits, b.ln.get(), p[kRouter], N,
                                      C, E, /*accumulate_dinp=*/true);
  }

 private:
  struct Block {
    Buffer<T> ln, x, gate, up, act, y;  // x: the packed rows; act = silu(gate) * up
    Buffer<T> xe, ye;                   // expert parallelism: this rank's experts' rows in and out
    // Qwen2-MoE's shared expert: its SwiGLU's activations and output, and
    // each token's sigmoid(x shared_expert_gate).
    Buffer<T> shared_gate, shared_up, shared_act, shared_out, shared_scale;
    transformer::moe::Routing routing;
    transformer::moe::Packing packing;
    std::optional<transformer::moe::ExpertExchange> exchange;  // expert parallelism
  };
  struct Scratch {
    Buffer<T> logits, dweight, drows, dgate, dup, dexperts;
    Buffer<T> dshared, dshared_gate, dshared_up, dscale;  // the shared expert's
  };

  int64_t shared_width() const { return cfg_.shared_expert_intermediate_size; }
  int shared(int which) const { return shared_expert_param(cfg_.held_experts(), which); }
  // out += sigmoid(ln wg^T) * SwiGLU(ln) over all N tokens (out null: the
  // activations only).
  template <class P>
  void shared_forward(Block& b, const P& p, T* out) {
    const int64_t N = N_, C = cfg_.hidden_size, S = shared_width();
    const T* ln = b.ln.get();
    linear(b.shared_gate.get(), ln, p[shared(kW1)], N, C, S);
    linear(b.shared_up.get(), ln, p[shared(kW3)], N, C, S);
    backend_.swiglu_forward(b.shared_act.get(), b.shared_gate.get(), b.shared_up.get(), N * S);
    linear(b.shared_out.get(), b.shared_act.get(), p[shared(kW2)], N, S, C);
    T* scale = b.shared_scale.get();
    linear(scale, ln, p[shared(kSharedGate)], N, C, 1);
    for (int64_t s = 0; s < N; ++s) scale[s] = T(1) / (T(1) + std::exp(-scale[s]));
    if (out == nullptr) return;
    for (int64_t s = 0; s < N; ++s)
      for (int64_t c = 0; c < C; ++c) out[s * C + c] += scale[s] * b.shared_out.get()[s * C + c];
  }
  // The shared expert's share of backward: its parameters' gradients and
  // its input gradient added into dln.
  template <class P, class G>
  void shared_backward(const Block& b, const P& p, G& g, const T* dout, T* dln) {
    const int64_t N = N_, C = cfg_.hidden_size, S = shared_width();
    const T* scale = b.shared_scale.get();
    const T* y = b.shared_out.get();
    T* dy = scratch_.dshared.get();
    T* dz = scratch_.dscale.get();  // d(loss) / d(the gate's logit)
    for (int64_t s = 0; s < N; ++s) {
      T dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        dy[s * C + c] = dout[s * C + c] * scale[s];
        dot += dout[s * C + c] * y[s * C + c];
      }
      dz[s] = dot * scale[s] * (T(1) - scale[s]);
    }
    const T* ln = b.ln.get();
    transformer::cpu::matmul_backward(dln, g[shared(kSharedGate)], kNoBias, dz, ln,
                                      p[shared(kSharedGate)], N, C, 1, /*accumulate_dinp=*/true);
    T* dgate = scratch_.dshared_gate.get();  // d(act), then d(gate) in place
    T* dup = scratch_.dshared_up.get();
    transformer::cpu::matmul_backward(dgate, g[shared(kW2)], kNoBias, dy, b.shared_act.get(),
                                      p[shared(kW2)], N, S, C);
    backend_.swiglu_backward(dgate, dup, dgate, b.shared_gate.get(), b.shared_up.get(), N * S);
    transformer::cpu::matmul_backward(dln, g[shared(kW1)], kNoBias, dgate, ln, p[shared(kW1)], N, C,
                                      S, /*accumulate_dinp=*/true);
    transformer::cpu::matmul_backward(dln, g[shared(kW3)], kNoBias, dup, ln, p[shared(kW3)], N, C,
                                      S, /*accumulate_dinp=*/true);
  }

  static constexpr const T* kBias = nullptr;  // the linears have no bias
  static constexpr T* kNoBias = nullptr;

  Buffer<T> alloc(int64_t n) { return backend_.template alloc<T>(n); }
  // `buffer` holding at least n values (its contents are not kept).
  void fit(Buffer<T>& buffer, int64_t n) {
    if (buffer.size() < n) buffer = alloc(n);
  }
  Block& block(int64_t l) { return blocks_.at(static_cast<size_t>(l - first_)); }
  bool spread() const { return cfg_.ep_size > 1; }
  transformer::moe::ExpertParallelGroup& group() { return backend_.expert_parallel(); }
  int64_t exchanged(const transformer::moe::ExpertExchange& x) const {
    return x.sent_bytes(cfg_.hidden_size, static_cast<int64_t>(sizeof(T)));
  }
  // Where each expert this rank holds starts in its expert rows (held
  // experts + 1 entries): its packing's, or the exchange's.
  static const std::vector<int64_t>& expert_rows(const Block& b) {
    return b.exchange ? b.exchange->expert_offsets() : b.packing.offset;
  }
  // fn(held expert, first row, rows) for each expert this rank holds with rows.
  template <class Fn>
  static void for_each_expert(const Block& b, Fn&& fn) {
    const std::vector<int64_t>& rows = expert_rows(b);
    for (int64_t j = 0; j + 1 < static_cast<int64_t>(rows.size()); ++j) {
      const int64_t r0 = rows[static_cast<size_t>(j)];
      const int64_t n = rows[static_cast<size_t>(j) + 1] - r0;
      if (n > 0) fn(j, r0, n);
    }
  }
  static void linear(T* out, const T* in, const T* w, int64_t n, int64_t C, int64_t OC) {
    transformer::cpu::matmul_forward(out, in, w, kBias, n, C, OC);
  }
  // The routes and router probabilities of the pass's tokens (not padding).
  void count(const transformer::moe::Routing& r) {
    const int64_t E = r.experts, S = r.tokens;
    for (int64_t s = 0; s < S; ++s) {
      if (padding_[static_cast<size_t>(s)] != 0) continue;
      for (int64_t j = 0; j < r.k; ++j) {
        stats_.load[static_cast<size_t>(r.chosen[static_cast<size_t>(j * S + s)])] += 1;
        stats_.routes += 1;
      }
      for (int64_t e = 0; e < E; ++e)
        probability_sum_[static_cast<size_t>(e)] += r.gates[static_cast<size_t>(s * E + e)];
      rows_ += 1;
    }
  }

  const LlamaConfig& cfg_;
  transformer::moe::GatingConfig gating_;
  Backend& backend_;
  int64_t N_ = 0, first_ = 0;
  std::vector<Block> blocks_;  // blocks first_ .. (empty for dense ones)
  Scratch scratch_;
  transformer::moe::PassStats stats_;
  std::vector<double> probability_sum_;  // per expert, over all blocks' tokens
  std::vector<double> route_share_;      // per expert: f_e, its routes per token routed
  int64_t rows_ = 0;                     // tokens routed, summed over the blocks
  std::vector<char> padding_;            // per token of the pass
};

}  // namespace dscore::llama
