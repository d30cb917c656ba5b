// The gpt's MoE blocks' MLP (GptConfig::moe_block), DeepSpeed-MoE's MOELayer
// on one rank: the gate's logits from the second LayerNorm's output, the
// routing (transformer_common/moe/gating.h), the kept routes packed expert by
// expert (moe/dispatch.h), each expert's GELU MLP over its rows, and the
// weighted combine; with moe_residual, PR-MoE's dense MLP mixed in by a
// learned 2-way softmax coefficient. Under expert parallelism (ep_size > 1)
// this rank holds E / ep_size experts: the packed rows go to their
// experts' ranks and come back through an ExpertExchange
// (transformer_common/moe/expert_exchange.h), over the group the host lends. Backward runs the same
// in reverse and adds the gate's gradient from the combine weights and from moe_loss_coeff * l_aux.
//
// Host memory only (the CPU backend: T float, or double in the gradient
// checks); the gpt refuses MoE on CUDA. Buffers come from the backend's
// alloc, so the model's declared activation memory counts them
// (counting_backend.h): per MoE block its kept activations (the routes'
// rows: at most k per token), and one set of backward scratch.
#pragma once

#include <dscore/cpp/counter_rng.hpp>

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
#include "../transformer_common/moe/noise.h"
#include "../transformer_common/moe/stats.h"
#include "gpt_config.h"
#include "gpt_params.h"

namespace dscore::gpt {

using MoeStats = transformer::moe::PassStats;

template <class Backend>
class GptMoe {
 public:
  using T = typename Backend::Scalar;
  template <typename X>
  using Buffer = typename Backend::template Buffer<X>;

  GptMoe(const GptConfig& config, Backend& backend, uint64_t seed)
      : cfg_(config), backend_(backend), seed_(seed) {}

  // Buffers for N tokens, for the MoE blocks among [lo, hi).
  void allocate(int64_t N, int64_t lo, int64_t hi) {
    N_ = N;
    blocks_.clear();
    first_ = lo;
    if (!cfg_.has_moe()) return;
    const int64_t C = cfg_.n_embd, H = 4 * C, R = cfg_.moe.k * N, E = cfg_.moe.num_experts;
    const int64_t Re = expected_expert_rows(N);
    for (int64_t l = lo; l < hi; ++l) {
      blocks_.emplace_back();
      if (!cfg_.moe_block(l)) continue;
      Block& b = blocks_.back();
      b.ln = alloc(N * C);
      b.x = alloc(R * C);
      b.hpre = alloc(Re * H);
      b.hact = alloc(Re * H);
      b.y = alloc(R * C);
      if (cfg_.ep_size > 1) {
        b.xe = alloc(Re * C);
        b.ye = alloc(Re * C);
      }
      if (cfg_.moe.noisy_gate_policy == transformer::moe::NoisyGate::kJitter)
        b.gate_in = alloc(N * C);
      if (cfg_.moe_residual) {
        b.moe_out = alloc(N * C);
        b.rfc = alloc(N * H);
        b.rfc_gelu = alloc(N * H);
        b.rout = alloc(N * C);
        b.coef = alloc(N * 2);
      }
    }
    const int64_t widest = std::max(Re, N);
    scratch_.logits = alloc(N * E);
    scratch_.dweight = alloc(R);
    scratch_.drows = alloc(std::max(R, N) * C);
    scratch_.dh1 = alloc(widest * H);
    scratch_.dh2 = alloc(widest * H);
    if (cfg_.ep_size > 1) scratch_.dexperts = alloc(Re * C);
    scratch_.dtokens = alloc(N * C);
    if (cfg_.moe_residual) scratch_.dcoef = alloc(N * 2);
  }

  // Where block l's second LayerNorm writes its output (the MLP's input).
  T* input(int64_t l) { return block(l).ln.get(); }

  // A new pass (forward_backward or forward) over samples named by
  // sample_keys (SplitTokens), each's tokens from position `first`: the
  // statistics restart.
  void begin_pass(const std::vector<uint64_t>& sample_keys, int64_t tokens_per_sample,
                  int64_t first, bool training) {
    samples_ = sample_keys;
    keys_ = {&samples_, tokens_per_sample, first};
    training_ = training;
    stats_ = MoeStats{};
    stats_.load.assign(static_cast<size_t>(cfg_.moe.num_experts), 0);
  }
  const MoeStats& stats() const { return stats_; }

  // Block l's MLP on input(l): into out (N x C, overwritten); out null:
  // only the activations (a checkpointed block's recomputation, whose
  // routing is the same: the noise is keyed by the tokens).
  template <class P>
  void forward(int64_t l, const P& p, T* out, bool recompute) {
    namespace moe = transformer::moe;
    Block& b = block(l);
    const int64_t N = N_, C = cfg_.n_embd, H = 4 * C, E = cfg_.moe.num_experts;
    const moe::GatingConfig& g = cfg_.moe;
    const uint64_t stream = gate_stream(l);
    // The gate: logits = (ln, jittered in training under "Jitter") wg^T, fp32 routing.
    const T* gate_in = b.ln.get();
    if (jittered()) {
      const std::vector<float> u = jitter(l);
      for (int64_t i = 0; i < N * C; ++i) b.gate_in.get()[i] = b.ln.get()[i] * static_cast<T>(u[i]);
      gate_in = b.gate_in.get();
    }
    T* logits = scratch_.logits.get();
    backend_.matmul_forward(logits, gate_in, p[kGateWeight], nullptr, N, C, E);
    std::vector<float> gumbel, uniform;
    if (moe::needs_gumbel(g, training_))
      gumbel = moe::draw_noise(moe::Draw::kGumbel, seed_, stream + 2, keys_, N, E);
    if (moe::needs_uniform(g, training_))
      uniform = moe::draw_noise(moe::Draw::kUniform, seed_, stream + 3, keys_, N, E);
    const moe::GatingNoise noise{gumbel.empty() ? nullptr : gumbel.data(),
                                 uniform.empty() ? nullptr : uniform.data()};
    b.routing = moe::route<T>(g, logits, N, training_, noise);
    b.packing = moe::pack(b.routing);
    if (!recompute) count(b.routing);
    // The experts, each over its packed rows (under expert parallelism this
    // rank's experts over the rows the group sent them). Their weights are
    // slices of the stacked tensors, fp32 copies in every run
    // (gpt_params.h): the fp32 linear, whatever form the layer's operands
    // take.
    moe::gather_rows(b.x.get(), b.ln.get(), b.packing, C);
    const T* xe = b.x.get();
    if (cfg_.ep_size > 1) {
      b.exchange.emplace(b.packing, E, static_cast<int>(cfg_.ep_size),
                         static_cast<int>(cfg_.ep_rank), group().counts());
      // The rows the group sends this rank's experts: the buffers grow
      // past the expected count (expected_expert_rows) when a pass needs it.
      const int64_t Re = b.exchange->expert_rows();
      fit(b.xe, Re * C);
      fit(b.ye, Re * C);
      fit(b.hpre, Re * H);
      fit(b.hact, Re * H);
      b.exchange->dispatch(b.x.get(), b.xe.get(), C, group().template rows<T>());
      xe = b.xe.get();
      stats_.exchanged_bytes += b.exchange->counts_bytes() + exchanged(*b.exchange);
    }
    const std::vector<int64_t>& rows = expert_rows(b);
    const int64_t El = cfg_.local_experts();
    for (int64_t e = 0; e < El; ++e) {
      const int64_t r0 = rows[e], n = rows[e + 1] - r0;
      if (n == 0) continue;
      transformer::cpu::matmul_forward(b.hpre.get() + r0 * H, xe + r0 * C,
                                       p[kExpertFcWeight] + e * H * C, p[kExpertFcBias] + e * H, n,
                                       C, H);
    }
    backend_.gelu_forward(b.hact.get(), b.hpre.get(), rows.back() * H);
    T* ye = cfg_.ep_size > 1 ? b.ye.get() : b.y.get();
    for (int64_t e = 0; e < El; ++e) {
      const int64_t r0 = rows[e], n = rows[e + 1] - r0;
      if (n == 0) continue;
      transformer::cpu::matmul_forward(ye + r0 * C, b.hact.get() + r0 * H,
                                       p[kExpertProjWeight] + e * C * H, p[kExpertProjBias] + e * C,
                                       n, H, C);
    }
    if (cfg_.ep_size > 1) b.exchange->combine(ye, b.y.get(), C, group().template rows<T>());
    if (!cfg_.moe_residual) {
      if (out != nullptr) moe::combine(out, b.y.get(), b.routing, b.packing, C);
      return;
    }
    // PR-MoE: out = moe * c0 + mlp * c1, c = softmax(ln W_c^T + b_c).
    moe::combine(b.moe_out.get(), b.y.get(), b.routing, b.packing, C);
    backend_.matmul_forward(b.rfc.get(), b.ln.get(), p[kResidualFcWeight], p[kResidualFcBias], N, C,
                            H);
    backend_.gelu_forward(b.rfc_gelu.get(), b.rfc.get(), N * H);
    backend_.matmul_forward(b.rout.get(), b.rfc_gelu.get(), p[kResidualProjWeight],
                            p[kResidualProjBias], N, H, C);
    T* coef = b.coef.get();
    backend_.matmul_forward(coef, b.ln.get(), p[kCoefficientWeight], p[kCoefficientBias], N, C, 2);
    for (int64_t s = 0; s < N; ++s) {
      const T m = std::max(coef[2 * s], coef[2 * s + 1]);
      const T e0 = std::exp(coef[2 * s] - m), e1 = std::exp(coef[2 * s + 1] - m);
      coef[2 * s] = e0 / (e0 + e1);
      coef[2 * s + 1] = e1 / (e0 + e1);
    }
    if (out == nullptr) return;
    for (int64_t s = 0; s < N; ++s)
      for (int64_t c = 0; c < C; ++c)
        out[s * C + c] =
            b.moe_out.get()[s * C + c] * coef[2 * s] + b.rout.get()[s * C + c] * coef[2 * s + 1];
  }

  // From dout (N x C, the gradient at the MLP's output): the gradient at
  // its input into dln (overwritten) and the block's MoE parameters'
  // gradients added into g. aux_grad: d(loss) / d(l_aux) (the coefficient
  // times the loss scale).
  template <class P, class G>
  void backward(int64_t l, const P& p, G& g, const T* dout, T* dln, double aux_grad) {
    namespace moe = transformer::moe;
    Block& b = block(l);
    const int64_t N = N_, C = cfg_.n_embd, H = 4 * C, E = cfg_.moe.num_experts;
    const T* dmoe = dout;
    backend_.zero(dln, N * C);
    if (cfg_.moe_residual) {
      T* dcoef = scratch_.dcoef.get();
      T* drout = scratch_.dtokens.get();
      const T* coef = b.coef.get();
      for (int64_t s = 0; s < N; ++s) {
        T d0 = 0, d1 = 0;
        for (int64_t c = 0; c < C; ++c) {
          d0 += dout[s * C + c] * b.moe_out.get()[s * C + c];
          d1 += dout[s * C + c] * b.rout.get()[s * C + c];
          drout[s * C + c] = dout[s * C + c] * coef[2 * s + 1];
        }
        const T inner = d0 * coef[2 * s] + d1 * coef[2 * s + 1];
        dcoef[2 * s] = coef[2 * s] * (d0 - inner);
        dcoef[2 * s + 1] = coef[2 * s + 1] * (d1 - inner);
      }
      backend_.matmul_backward(dln, g[kCoefficientWeight], g[kCoefficientBias], dcoef, b.ln.get(),
                               p[kCoefficientWeight], N, C, 2, /*accumulate_dinp=*/true);
      T* dh = scratch_.dh1.get();
      T* dfc = scratch_.dh2.get();
      backend_.matmul_backward(dh, g[kResidualProjWeight], g[kResidualProjBias], drout,
                               b.rfc_gelu.get(), p[kResidualProjWeight], N, H, C);
      backend_.gelu_backward(dfc, b.rfc.get(), dh, N * H);
      backend_.matmul_backward(dln, g[kResidualFcWeight], g[kResidualFcBias], dfc, b.ln.get(),
                               p[kResidualFcWeight], N, C, H, /*accumulate_dinp=*/true);
      // The experts' share of dout, scaled by c0 (drout is free again).
      for (int64_t s = 0; s < N; ++s)
        for (int64_t c = 0; c < C; ++c) drout[s * C + c] = dout[s * C + c] * coef[2 * s];
      dmoe = drout;
    }
    // The combine: each route's rows and its weight's gradient.
    T* drows = scratch_.drows.get();
    T* dweight = scratch_.dweight.get();
    moe::combine_backward(drows, dweight, dmoe, b.y.get(), b.routing, b.packing, C);
    // The experts' rows: this rank's packing, or under expert parallelism
    // the rows the group sent this rank's experts (their dy out the way
    // the outputs came back, their dx back the way the inputs went).
    const bool spread = cfg_.ep_size > 1;
    if (spread) {
      const int64_t Re = b.exchange->expert_rows();
      fit(scratch_.dexperts, Re * C);
      fit(scratch_.dh1, Re * H);
      fit(scratch_.dh2, Re * H);
    }
    T* de = spread ? scratch_.dexperts.get() : drows;
    if (spread) b.exchange->dispatch(drows, de, C, group().template rows<T>());
    const T* xe = spread ? b.xe.get() : b.x.get();
    const std::vector<int64_t>& rows = expert_rows(b);
    const int64_t El = cfg_.local_experts();
    T* dhact = scratch_.dh1.get();
    T* dhpre = scratch_.dh2.get();
    for (int64_t e = 0; e < El; ++e) {
      const int64_t r0 = rows[e], n = rows[e + 1] - r0;
      if (n == 0) continue;
      transformer::cpu::matmul_backward(
          dhact + r0 * H, g[kExpertProjWeight] + e * C * H, g[kExpertProjBias] + e * C, de + r0 * C,
          b.hact.get() + r0 * H, p[kExpertProjWeight] + e * C * H, n, H, C);
    }
    backend_.gelu_backward(dhpre, b.hpre.get(), dhact, rows.back() * H);
    for (int64_t e = 0; e < El; ++e) {
      const int64_t r0 = rows[e], n = rows[e + 1] - r0;
      if (n == 0) continue;
      // de (the rows' dy) is done with: it takes the rows' input gradients.
      transformer::cpu::matmul_backward(de + r0 * C, g[kExpertFcWeight] + e * H * C,
                                        g[kExpertFcBias] + e * H, dhpre + r0 * H, xe + r0 * C,
                                        p[kExpertFcWeight] + e * H * C, n, C, H);
    }
    if (spread) {
      b.exchange->combine(de, drows, C, group().template rows<T>());
      stats_.exchanged_bytes += exchanged(*b.exchange);
    }
    moe::scatter_add_rows(dln, drows, b.packing, C);
    // The gate, from the combine weights and the aux loss.
    T* dlogits = scratch_.logits.get();
    moe::route_backward<T>(cfg_.moe, b.routing, dweight, aux_grad, dlogits);
    if (jittered()) {
      // d(ln * u) = d * u: through dtokens, then scaled into dln (u drawn
      // again: a pure function of the tokens, not kept).
      T* dgate = scratch_.dtokens.get();
      backend_.matmul_backward(dgate, g[kGateWeight], nullptr, dlogits, b.gate_in.get(),
                               p[kGateWeight], N, C, E);
      const std::vector<float> u = jitter(l);
      for (int64_t i = 0; i < N * C; ++i) dln[i] += dgate[i] * static_cast<T>(u[i]);
    } else {
      backend_.matmul_backward(dln, g[kGateWeight], nullptr, dlogits, b.ln.get(), p[kGateWeight], N,
                               C, E, /*accumulate_dinp=*/true);
    }
  }

 private:
  struct Block {
    Buffer<T> ln, x, hpre, hact, y, gate_in;       // gate_in: the jittered gate input
    Buffer<T> moe_out, rfc, rfc_gelu, rout, coef;  // moe_residual
    Buffer<T> xe, ye;  // expert parallelism: this rank's experts' rows in and out
    transformer::moe::Routing routing;
    transformer::moe::Packing packing;
    std::optional<transformer::moe::ExpertExchange> exchange;  // expert parallelism
  };
  struct Scratch {
    Buffer<T> logits, dweight, drows, dh1, dh2, dtokens, dcoef, dexperts;
  };

  // Where each of this rank's experts' rows start in its expert rows
  // (local experts + 1 entries): its packing's, or the exchange's.
  static const std::vector<int64_t>& expert_rows(const Block& b) {
    return b.exchange ? b.exchange->expert_offsets() : b.packing.offset;
  }
  transformer::moe::ExpertParallelGroup& group() { return backend_.expert_parallel(); }
  int64_t exchanged(const transformer::moe::ExpertExchange& x) const {
    return x.sent_bytes(cfg_.n_embd, static_cast<int64_t>(sizeof(T)));
  }

  Buffer<T> alloc(int64_t n) { return backend_.template alloc<T>(n); }
  // `buffer` holding at least n values (its contents are not kept).
  void fit(Buffer<T>& buffer, int64_t n) {
    if (buffer.size() < n) buffer = alloc(n);
  }
  // Rows this rank's experts compute in a pass of N tokens: its kept
  // routes (at most k per token). Under expert parallelism the rows the
  // group sends them: with capacity routing at most each local expert's
  // capacity from every rank; dropless, as many as its own when the routes
  // are balanced (an imbalanced pass grows the buffers: fit).
  int64_t expected_expert_rows(int64_t N) const {
    const transformer::moe::GatingConfig& g = cfg_.moe;
    const int64_t R = g.k * N;
    if (cfg_.ep_size == 1 || g.router != transformer::moe::Router::kDeepSpeed || !g.drop_tokens)
      return R;
    return std::min(cfg_.ep_size * R, cfg_.ep_size * cfg_.local_experts() *
                                          transformer::moe::drop_capacity(g, N, /*training=*/true));
  }
  // Block l's random streams (moe/noise.h): + 1 Jitter, + 2 Gumbel, + 3 uniform.
  static uint64_t gate_stream(int64_t l) {
    return sdk::hash_key(static_cast<uint64_t>(l), 0x67617465 /*"gate"*/, 0);
  }
  bool jittered() const {
    return training_ && cfg_.moe.noisy_gate_policy == transformer::moe::NoisyGate::kJitter;
  }
  // Jitter's multipliers of block l's gate input, U(0.99, 1.01) per element.
  std::vector<float> jitter(int64_t l) const {
    namespace moe = transformer::moe;
    return moe::draw_noise(moe::Draw::kUniform, seed_, gate_stream(l) + 1, keys_, N_, cfg_.n_embd,
                           1.0 - 1e-2, 1.0 + 1e-2);
  }
  Block& block(int64_t l) { return blocks_.at(static_cast<size_t>(l - first_)); }
  void count(const transformer::moe::Routing& r) {
    stats_.aux_loss += r.aux_loss;
    stats_.dropped_routes += r.dropped;
    for (size_t e = 0; e < r.expert_counts.size(); ++e) {
      stats_.load[e] += r.expert_counts[e];
      stats_.routes += r.expert_counts[e];
    }
  }

  const GptConfig& cfg_;
  Backend& backend_;
  uint64_t seed_;
  int64_t N_ = 0, first_ = 0;
  std::vector<Block> blocks_;  // blocks first_ .. (empty for dense ones)
  Scratch scratch_;
  std::vector<uint64_t> samples_;
  transformer::moe::TokenKeys keys_;
  bool training_ = true;
  MoeStats stats_;
};

}  // namespace dscore::gpt
