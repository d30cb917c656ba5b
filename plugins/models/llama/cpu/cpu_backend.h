// The CPU backend of the llama runner (runner.h lists what a backend
// provides): host buffers and parameter/gradient views as
// plugins/models/transformer_common/cpu/host_backend.h, llama's kernels (kernels.h)
// and the ones it shares with gpt (plugins/models/transformer_common/cpu).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "../../transformer_common/cpu/attention.h"
#include "../../transformer_common/cpu/host_backend.h"
#include "../../transformer_common/cpu/linear.h"
#include "../rope.h"
#include "kernels.h"

namespace dscore::llama::cpu {

namespace shared = transformer::cpu;

template <typename T>
class CpuBackend : public shared::HostBackend<T> {
 public:
  explicit CpuBackend(sdk::HostRef host = {})
      : shared::HostBackend<T>(host, "llama", "llama activations") {}

  void rope_tables(T* cos, T* sin, const std::vector<double>& inv_freq, int64_t Tn) {
    llama::rope_tables(cos, sin, inv_freq, Tn);
  }
  // From the bf16 view where embed has one (its fp32 copy may be left
  // unconverted: embedding_gemm_weights).
  void embedding_forward(T* out, const int32_t* tokens, const T* embed, int64_t N, int64_t C) {
    embedding_forward_part(out, tokens, embed, N, C, 0, INT64_MAX);
  }
  void embedding_backward(T* dembed, const T* dout, const int32_t* tokens, int64_t N, int64_t C) {
    cpu::embedding_backward(dembed, dout, tokens, N, C);
  }
  // Tensor parallelism: the embedding of vocabulary rows [v0, v0 + rows).
  void embedding_forward_part(T* out, const int32_t* tokens, const T* embed, int64_t N, int64_t C,
                              int64_t v0, int64_t rows) {
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* embed16 = this->bf16_view_of(embed))
        return cpu::embedding_forward_bf16(out, tokens, embed16, N, C, v0, rows);
    }
    cpu::embedding_forward(out, tokens, embed, N, C, v0, rows);
  }
  void embedding_backward_part(T* dembed, const T* dout, const int32_t* tokens, int64_t N,
                               int64_t C, int64_t v0, int64_t rows) {
    cpu::embedding_backward(dembed, dout, tokens, N, C, v0, rows);
  }
  void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int64_t N, int64_t C,
                       double eps) {
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  // The runner's fused block (runner.h, kFusedBlock): the output as an
  // operand buffer of the linear(s) whose weight is `reader`
  // (HostBackend::matmul_forward_operand): rounded to bf16 as it is written
  // when that linear reads bf16. out must not alias the inputs.
  void rmsnorm_forward_operand(T* out, T* rstd, const T* inp, const T* w, int64_t N, int64_t C,
                               double eps, const T* reader) {
    if constexpr (std::is_same_v<T, float>) {
      if (this->bf16_operand_for(reader))
        return cpu::rmsnorm_forward_bf16(reinterpret_cast<uint16_t*>(out), rstd, inp, w, N, C, eps);
    }
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  void swiglu_forward_operand(T* out, const T* gate, const T* up, int64_t n, const T* reader) {
    if constexpr (std::is_same_v<T, float>) {
      if (this->bf16_operand_for(reader))
        return cpu::swiglu_forward_bf16(reinterpret_cast<uint16_t*>(out), gate, up, n);
    }
    cpu::swiglu_forward(out, gate, up, n);
  }
  void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd,
                        int64_t N, int64_t C) {
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  }
  void rope_forward(T* x, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
                    int64_t head_dim, int64_t ld) {
    cpu::rope_forward(x, cos, sin, B, Tn, heads, head_dim, ld);
  }
  void rope_backward(T* dx, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
                     int64_t head_dim, int64_t ld) {
    cpu::rope_backward(dx, cos, sin, B, Tn, heads, head_dim, ld);
  }
  void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
    cpu::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
    cpu::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  // The fused block's MLP backward (runner.h): d is the gradient at the
  // MLP's output; dln gets the one at its input (overwritten). dgate and
  // dup are scratch (N x I): operand buffers of gate_proj and up_proj. In a
  // bf16 layer down_proj's input gradient goes to SwiGLU's backward chunk
  // by chunk while in cache (gemm_bf16_consumed) and is never written out;
  // otherwise it goes through dgate first.
  void mlp_backward(T* dln, T* dw_gate, T* dw_up, T* dw_down, T* dgate, T* dup, const T* d,
                    const T* ln2, const T* gate, const T* up, const T* swiglu, const T* w_gate,
                    const T* w_up, const T* w_down, int64_t N, int64_t C, int64_t I) {
    if (this->bf16_operand_for(w_down) != this->bf16_operand_for(w_gate) ||
        this->bf16_operand_for(w_gate) != this->bf16_operand_for(w_up))
      throw std::logic_error("llama: the MLP's linears differ in dtype");
    if constexpr (std::is_same_v<T, float>) {
      if (const uint16_t* w_down16 = this->bf16_view_of(w_down)) {
        uint16_t* dgate16 = reinterpret_cast<uint16_t*>(dgate);
        uint16_t* dup16 = reinterpret_cast<uint16_t*>(dup);
        transformer::cpu::matmul_backward_bf16_consumed(
            dw_down, nullptr, {d, nullptr}, {nullptr, reinterpret_cast<const uint16_t*>(swiglu)},
            w_down16, N, I, C, [&](int64_t r0, int64_t r1, float* rows) {
              cpu::swiglu_backward_bf16_rows(dgate16, dup16, rows, gate, up, r0, r1, I);
            });
        this->matmul_backward_operands(dln, dw_gate, dgate, ln2, w_gate, N, C, I);
        this->matmul_backward_operands(dln, dw_up, dup, ln2, w_up, N, C, I, true);
        return;
      }
    }
    this->matmul_backward_operand(dgate, dw_down, nullptr, d, swiglu, w_down, N, I, C);
    cpu::swiglu_backward(dgate, dup, dgate, gate, up, N * I);
    this->matmul_backward_operand(dln, dw_gate, nullptr, dgate, ln2, w_gate, N, C, I);
    this->matmul_backward_operand(dln, dw_up, nullptr, dup, ln2, w_up, N, C, I, true);
  }
  // matmul_forward, matmul_backward, attention_forward, attention_backward
  // and lm_head_forward_backward: HostBackend's (fp32, or bf16 products in a
  // bf16 layer).
  int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) const {
    return shared::attention_state_elements(B, Tn, NH);
  }
  void add(T* out, const T* a, const T* b, int64_t n) { shared::add(out, a, b, n); }
  double lm_head_forward(const T* x, const T* w, const int32_t* targets, int64_t N, int64_t C,
                         int64_t V, const int64_t* rows, int64_t n_rows, float* logits) {
    return shared::lm_head_forward(x, w, targets, N, C, V, rows, n_rows, logits);
  }
};

}  // namespace dscore::llama::cpu
