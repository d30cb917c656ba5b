// The CPU backend of the llama runner (runner.h lists what a backend
// provides): host buffers and parameter/gradient views as
// plugins/models/transformer_common/cpu/host_backend.h, llama's kernels (kernels.h)
// and the ones it shares with gpt (plugins/models/transformer_common/cpu).
#pragma once

#include <cstdint>
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
  void embedding_forward(T* out, const int32_t* tokens, const T* embed, int64_t N, int64_t C) {
    cpu::embedding_forward(out, tokens, embed, N, C);
  }
  void embedding_backward(T* dembed, const T* dout, const int32_t* tokens, int64_t N, int64_t C) {
    cpu::embedding_backward(dembed, dout, tokens, N, C);
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
