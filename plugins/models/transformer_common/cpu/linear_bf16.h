// nn.Linear (linear.h's matmul_forward / matmul_backward, T = float) with
// bf16 weights, on the bf16 GEMM (gemm_bf16.h): for runs whose parameters
// are bf16, on machines that have that GEMM (bf16_gemm_available()). The
// weight is read as the bf16 parameter view holds it; the activation and
// output-gradient operands are rounded to bf16 (nearest even) just for the
// GEMM; products accumulate in fp32 and every output (out, dinp, dweight,
// dbias) is fp32, as in linear.h. Rounding the operands is the numerical
// difference from the fp32 path (docs/gpt.md, "CPU compute").
#pragma once

#include <cstdint>

#include "gemm_bf16.h"

namespace dscore::transformer::cpu {

void matmul_forward_bf16(float* out, const float* inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const uint16_t* weight, int64_t N, int64_t C,
                          int64_t OC, bool accumulate_dinp = false);

// An activation or output-gradient operand: fp32 values, rounded to bf16
// for the call, or values a kernel already rounded (the same bits either
// way: a producer that rounds as it writes saves the pass over fp32).
struct Bf16Operand {
  const float* values = nullptr;
  const uint16_t* rounded = nullptr;
};
void matmul_forward_bf16(float* out, Bf16Operand inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC);
// dbias needs dout's fp32 values (nullptr where the producer of a rounded
// dout summed it already: gelu_backward_bias_bf16).
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, Bf16Operand dout,
                          Bf16Operand inp, const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                          bool accumulate_dinp = false);

// The forward with its output handed to consume in chunks instead of
// written to memory (gemm_bf16_consumed): for an output that one pass reads
// once (the qkv linear's, rounded into attention's heads).
void matmul_forward_bf16_consumed(Bf16Operand inp, const uint16_t* weight, const float* bias,
                                  int64_t N, int64_t C, int64_t OC, const ConsumeRows& consume);
// The backward with the input gradient's product handed to consume_dinp in
// chunks instead of written to memory (gemm_bf16_consumed): for a gradient
// that one elementwise pass reads once (GELU's, in the GPT's MLP).
void matmul_backward_bf16_consumed(float* dweight, float* dbias, Bf16Operand dout, Bf16Operand inp,
                                   const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                                   const ConsumeRows& consume_dinp);

// Weight-gradient buffers lent unzeroed (HostBackend::Grads, for a bf16
// linear's weight): the first weight-gradient product into one, covering
// it whole, overwrites it instead of adding to zeros. That spares a pass
// writing zeros over every linear's fp32 gradient each micro-step (400 MB
// a step on the ~100M Llama) and the product's first read of them. Any
// other first write zeroes the buffer first (a product into part of it).
// Per thread: the runner's, which calls the products. Under ASan a lent
// buffer is poisoned until written, so a read before fails.
void lend_unwritten_gradient(float* p, int64_t n);
// Forgets p (lent above); true if nothing was written into it (it holds
// no gradient: zeros).
bool end_unwritten_gradient(float* p);
// For a product about to write n elements from p (dW = dY^T X): true if it
// may overwrite them (beta 0), as p is lent unwritten and the product
// covers it; p is written after. A product into part of a lent buffer
// zeroes it first (false: add). False for a buffer not lent.
bool overwrites_unwritten_gradient(float* p, int64_t n);

// The rounded operands the two keep from call to call on the calling
// thread: the widest input (N x max_in) and output gradient (N x max_out)
// among a pass's linears.
uint64_t linear_bf16_working_bytes(int64_t N, int64_t max_in, int64_t max_out);

}  // namespace dscore::transformer::cpu
