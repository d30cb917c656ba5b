// The CPU backend of the GPT runner (runner.h lists what a backend
// provides): host buffers and parameter/gradient views as
// plugins/models/transformer_common/cpu/host_backend.h, and the kernels of kernels.h.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "../../transformer_common/cpu/host_backend.h"
#include "kernels.h"

namespace dscore::gpt::cpu {

template <typename T>
class CpuBackend : public transformer::cpu::HostBackend<T> {
  using Base = transformer::cpu::HostBackend<T>;

 public:
  explicit CpuBackend(sdk::HostRef host = {})
      : transformer::cpu::HostBackend<T>(host, "gpt", "gpt activations") {}

  void encoder_forward(T* out, const int32_t* tok, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C) {
    cpu::encoder_forward(out, tok, wte, wpe, B, Tn, C);
  }
  void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tok, int64_t B, int64_t Tn,
                        int64_t C) {
    cpu::encoder_backward(dwte, dwpe, dout, tok, B, Tn, C);
  }
  // ---- tensor parallelism (runner.h's split path): the embeddings of
  // vocabulary rows [v0, v0 + rows) (the head and the group's sum are
  // HostBackend's).
  void encoder_forward_part(T* out, const int32_t* tok, const T* wte, const T* wpe, int64_t B,
                            int64_t Tn, int64_t C, int64_t v0, int64_t rows) {
    cpu::encoder_forward(out, tok, wte, wpe, B, Tn, C, v0, rows);
  }
  void encoder_backward_part(T* dwte, T* dwpe, const T* dout, const int32_t* tok, int64_t B,
                             int64_t Tn, int64_t C, int64_t v0, int64_t rows) {
    cpu::encoder_backward(dwte, dwpe, dout, tok, B, Tn, C, v0, rows);
  }
  void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N,
                         int64_t C) {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  // The runner's fused block (runner.h, kFusedBlock): the LayerNorms with
  // their output as an operand buffer of the linear whose
  // weight is `reader` (HostBackend::matmul_forward_operand): rounded to
  // bf16 as it is written when that linear reads bf16; the residual one
  // computes sum = a + b first. out must not alias the inputs.
  void layernorm_forward_operand(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b,
                                 int64_t N, int64_t C, const T* reader) {
    if constexpr (std::is_same_v<T, float>) {
      if (this->bf16_operand_for(reader))
        return cpu::layernorm_forward_bf16(reinterpret_cast<uint16_t*>(out), mean, rstd, inp, w, b,
                                           N, C);
    }
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void residual_layernorm_forward_operand(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b,
                                          const T* w, const T* bias, int64_t N, int64_t C,
                                          const T* reader) {
    if constexpr (std::is_same_v<T, float>) {
      if (this->bf16_operand_for(reader))
        return cpu::residual_layernorm_forward_bf16(sum, reinterpret_cast<uint16_t*>(out), mean,
                                                    rstd, a, b, w, bias, N, C);
    }
    cpu::residual_layernorm_forward(sum, out, mean, rstd, a, b, w, bias, N, C);
  }
  void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                          const T* mean, const T* rstd, int64_t N, int64_t C) {
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  // matmul_forward, matmul_backward and lm_head_forward_backward:
  // HostBackend's (fp32, or the bf16 GEMM in a bf16 layer).
  // The tiled kernels of attention.h: the state is each row's logsumexp.
  int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) const {
    return cpu::attention_state_elements(B, Tn, NH);
  }
  // On packed q|k|v rows, through HostBackend's (bf16 products in a bf16 layer).
  void attention_forward(T* out, T* state, const T* qkv, int64_t B, int64_t Tn, int64_t C,
                         int64_t NH) {
    Base::attention_forward(out, state, qkv, qkv + C, qkv + 2 * C,
                            packed_attention_shape(B, Tn, C, NH));
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* state,
                          int64_t B, int64_t Tn, int64_t C, int64_t NH) {
    Base::attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out,
                             state, packed_attention_shape(B, Tn, C, NH));
  }
  // The fused block's qkv linear and attention (runner.h): qkv = ln1 W^T +
  // b, then attention on it. In a bf16 layer `kept` (the qkv activation's
  // buffer: attention_bf16_heads_elements bf16 values) gets attention's
  // rounded heads straight from the linear's product, chunk by chunk
  // (gemm_bf16_consumed: the fp32 q|k|v are never written out), and the
  // backward reads them (attention_backward_kept, rounded_heads);
  // otherwise kept holds q|k|v themselves.
  void qkv_attention_forward(T* out, T* state, T* kept, const T* ln1, const T* w, const T* b,
                             int64_t B, int64_t Tn, int64_t C, int64_t width, int64_t NH) {
    // C: ln1's channels; width: each of q, k and v's (C / the
    // tensor-parallel size: this rank's NH heads).
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w16 = this->bf16_view_of(w)) {
        const transformer::cpu::AttentionShape shape = packed_attention_shape(B, Tn, width, NH);
        uint16_t* heads = reinterpret_cast<uint16_t*>(kept);
        transformer::cpu::matmul_forward_bf16_consumed(
            {nullptr, reinterpret_cast<const uint16_t*>(ln1)}, w16, b, B * Tn, C, 3 * width,
            [&](int64_t r0, int64_t r1, float* rows) {
              transformer::cpu::round_heads_rows(heads, rows, rows + width, rows + 2 * width, r0,
                                                 r1, shape);
            });
        transformer::cpu::attention_forward_bf16(out, state, nullptr, nullptr, nullptr, shape,
                                                 transformer::cpu::vector_isa(), heads);
        return;
      }
    }
    this->matmul_forward_operand(kept, ln1, w, b, B * Tn, C, 3 * width);
    attention_forward(out, state, kept, B, Tn, width, NH);
  }
  void attention_backward_kept(T* dqkv, const T* dout, const T* kept, const T* out, const T* state,
                               bool rounded_heads, int64_t B, int64_t Tn, int64_t C, int64_t NH) {
    if constexpr (std::is_same_v<T, float>) {
      if (rounded_heads) {
        require_bf16_layer();
        return transformer::cpu::attention_backward_bf16(
            dqkv, dqkv + C, dqkv + 2 * C, dout, nullptr, nullptr, nullptr, out, state,
            packed_attention_shape(B, Tn, C, NH), transformer::cpu::vector_isa(),
            reinterpret_cast<const uint16_t*>(kept));
      }
    }
    attention_backward(dqkv, dout, kept, out, state, B, Tn, C, NH);
  }
  void gelu_forward(T* out, const T* inp, int64_t n) { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  // The MLP (the runner uses it where a backend has it): fch = ln2 W_fc^T +
  // b_fc, fch_gelu = gelu(fch), out = fch_gelu W_proj^T + b_proj (out null:
  // the activations only, when recomputing). ln2 is an operand buffer of
  // the fc linear (layernorm_forward_operand), fch_gelu one of the
  // projection's: rounded to bf16 as it is made when that linear reads
  // bf16.
  // H: the hidden width (4C, or this rank's part of it).
  void mlp_forward(T* out, T* fch, T* fch_gelu, const T* ln2, const T* w_fc, const T* b_fc,
                   const T* w_proj, const T* b_proj, int64_t N, int64_t C, int64_t H) {
    require_one_form(w_fc, w_proj);
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w_fc16 = this->bf16_view_of(w_fc)) {
        // GELU on each chunk of fch as the product makes it, in cache
        // (gemm_bf16_consumed); fch itself streamed out for the backward.
        uint16_t* gelu16 = reinterpret_cast<uint16_t*>(fch_gelu);
        transformer::cpu::matmul_forward_bf16_consumed(
            {nullptr, reinterpret_cast<const uint16_t*>(ln2)}, w_fc16, b_fc, N, C, H,
            [&](int64_t r0, int64_t r1, float* rows) {
              cpu::gelu_forward_bf16_rows(fch, gelu16, rows, r0, r1, H);
            });
        if (out != nullptr) this->matmul_forward_operand(out, fch_gelu, w_proj, b_proj, N, H, C);
        return;
      }
    }
    this->matmul_forward_operand(fch, ln2, w_fc, b_fc, N, C, H);
    cpu::gelu_forward(fch_gelu, fch, N * H);
    if (out != nullptr) this->matmul_forward_operand(out, fch_gelu, w_proj, b_proj, N, H, C);
  }
  // Its backward: d is the gradient at the MLP's output; dln gets the one
  // at its input (overwritten). dfch_gelu and dfch are scratch (N x 4C);
  // dfch, the GELU gradient, is an operand buffer of the fc linear (its
  // bias gradient summed as it is made). In a bf16 layer the projection's
  // input gradient goes to GELU's backward chunk by chunk while in cache
  // (gemm_bf16_consumed) and dfch_gelu is not used.
  void mlp_backward(T* dln, T* dw_fc, T* db_fc, T* dw_proj, T* db_proj, T* dfch_gelu, T* dfch,
                    const T* d, const T* ln2, const T* fch, const T* fch_gelu, const T* w_fc,
                    const T* w_proj, int64_t N, int64_t C, int64_t H) {
    if constexpr (std::is_same_v<T, float>) {
      require_one_form(w_fc, w_proj);
      if (const uint16_t* w_proj16 = this->bf16_view_of(w_proj)) {
        uint16_t* dfch16 = reinterpret_cast<uint16_t*>(dfch);
        transformer::cpu::RowSumPartials<float> dbias(N, H);
        transformer::cpu::matmul_backward_bf16_consumed(
            dw_proj, db_proj, {d, nullptr}, {nullptr, reinterpret_cast<const uint16_t*>(fch_gelu)},
            w_proj16, N, H, C, [&](int64_t r0, int64_t r1, float* rows) {
              cpu::gelu_backward_bias_bf16_rows(dfch16, dbias, fch, rows, r0, r1, H);
            });
        dbias.sum_into(db_fc);
        this->matmul_backward_operands(dln, dw_fc, dfch, ln2, w_fc, N, C, H);
        return;
      }
    }
    this->matmul_backward_operand(dfch_gelu, dw_proj, db_proj, d, fch_gelu, w_proj, N, H, C);
    cpu::gelu_backward_bias(dfch, db_fc, fch, dfch_gelu, N, H);
    this->matmul_backward_operands(dln, dw_fc, dfch, ln2, w_fc, N, C, H);
  }
  void add(T* out, const T* a, const T* b, int64_t n) { cpu::add(out, a, b, n); }
  double lm_head_forward(const T* x, const T* wte, const int32_t* targets, int64_t N, int64_t C,
                         int64_t V, const int64_t* rows, int64_t n_rows, float* logits_host) {
    return cpu::lm_head_forward(x, wte, targets, N, C, V, rows, n_rows, logits_host);
  }

 private:
  // The MLP's two linears read the same form (a layer's parameters share
  // one dtype): its fused bf16 paths read one linear's form from the other.
  void require_one_form(const T* w_fc, const T* w_proj) const {
    if (this->bf16_operand_for(w_fc) != this->bf16_operand_for(w_proj))
      throw std::logic_error("gpt: the MLP's two linears differ in dtype");
  }
  void require_bf16_layer() const {
    if (!this->bf16_compute())
      throw std::logic_error("gpt: rounded attention heads asked for outside a bf16 layer");
  }
};

}  // namespace dscore::gpt::cpu
