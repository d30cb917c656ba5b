// The CPU backend of the GPT runner (runner.h lists what a backend
// provides): host buffers and parameter/gradient views as
// plugins/models/transformer_common/cpu/host_backend.h, and the kernels of kernels.h.
#pragma once

#include <cstdint>

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
  void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N,
                         int64_t C) {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  // Fused: sum = a + b, out = layernorm(sum) (the runner uses it where a
  // backend has it, else add and layernorm_forward).
  void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b,
                                  const T* w, const T* bias, int64_t N, int64_t C) {
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
  void gelu_forward(T* out, const T* inp, int64_t n) { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  // Fused: gelu_backward and the bias gradient of the layer before it.
  void gelu_backward_bias(T* dinp, T* dbias, const T* inp, const T* dout, int64_t N, int64_t OC) {
    cpu::gelu_backward_bias(dinp, dbias, inp, dout, N, OC);
  }
  void add(T* out, const T* a, const T* b, int64_t n) { cpu::add(out, a, b, n); }
  double lm_head_forward(const T* x, const T* wte, const int32_t* targets, int64_t N, int64_t C,
                         int64_t V, const int64_t* rows, int64_t n_rows, float* logits_host) {
    return cpu::lm_head_forward(x, wte, targets, N, C, V, rows, n_rows, logits_host);
  }
};

}  // namespace dscore::gpt::cpu
