// The CPU kernels every decoder here shares, forward and backward, for
// T = float (the plugins) and T = double (the finite-difference gradient
// checks): nn.Linear, the residual add, and the LM head with cross-entropy.
// Layout is row-major: activations (N rows, C channels), weights as
// PyTorch's nn.Linear (out, in). Matmuls go through BLAS (gemm.h). Weight
// and bias gradients ACCUMULATE (+=); input gradients named `dinp` are
// overwritten unless stated otherwise.
#pragma once

#include <cstdint>

namespace dscore::transformer::cpu {

// out (N, OC) = inp (N, C) * weight(OC, C)^T + bias (bias may be null).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC);
// dbias may be null (no bias). With accumulate_dinp, dinp += instead of =
// (several projections of one input, as Llama's q/k/v and gate/up).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC, bool accumulate_dinp = false);

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);  // out = a + b (out may alias a)

// The LM head with cross-entropy, over N rows in blocks (the N x V logits
// never exist at once): loss_i = logsumexp(x_i w^T) - logit at targets[i],
// w (V, C) the head's weight (GPT's and a tied Llama's is the token
// embedding); rows whose target is < 0 are ignored. Overwrites dx with
// d(sum_i grad_scale * loss_i)/dx and accumulates the same into dw.
// Returns the sum of loss_i over the counted rows. With w16 (T = float, a
// bf16 layer: w's bf16 parameter view, where the bf16 GEMM is available)
// its three products run on the bf16 GEMM, x and the logits' gradient
// rounded to bf16 for them, as linear_bf16.h; the softmax stays fp32.
template <typename T>
double lm_head_forward_backward(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                                int64_t N, int64_t C, int64_t V, double grad_scale,
                                const uint16_t* w16 = nullptr);
// Forward only: the loss sum over rows with targets >= 0 (targets may be
// null: no loss), and the logits of rows `rows[0..n_rows)` into
// logits (n_rows, V) if non-null.
template <typename T>
double lm_head_forward(const T* x, const T* w, const int32_t* targets, int64_t N, int64_t C,
                       int64_t V, const int64_t* rows, int64_t n_rows, float* logits);

// Rows of logits the LM head holds at once (about 16M logits, 64 MiB: each
// block adds its part into the whole weight gradient, V x C read and
// written again, so few large blocks; 4M-logit blocks left the ~100M
// Llama's 32000-token head 8% slower): with a row's
// two statistics (fp64), the head's working memory beside the activations.
int64_t lm_rows_per_block(int64_t N, int64_t V);
// Bytes of that working memory: lm_rows_per_block rows of V fp32 logits
// and two fp64 statistics each (what a model's activation_bytes adds).
uint64_t lm_head_working_bytes(int64_t N, int64_t V);
// With a bf16 weight view (w16), also a block's rounded rows of x and of
// the logits' gradient.
uint64_t lm_head_bf16_working_bytes(int64_t N, int64_t C, int64_t V);

}  // namespace dscore::transformer::cpu
