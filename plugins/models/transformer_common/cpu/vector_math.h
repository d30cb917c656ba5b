// Elementwise fp32 kernels vectorised for the CPU at hand, chosen once at
// run time: AVX-512 where the CPU has it, else AVX2 + FMA, else scalar.
// tanh and exp come from glibc's vector math library (libmvec), whose AVX2
// tanhf is about 15x faster than the scalar one and within 2 ulp of it;
// GELU spent a fifth of a GPT training step in scalar tanhf.
//
// Every element goes through the same instruction sequence (the tail is
// padded into a full vector), so a value's result does not depend on where
// it lies in the array or on how the caller splits the work.
#pragma once

#include <dscore/cpp/cpu_isa.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dscore::transformer::cpu {

using VectorIsa = sdk::CpuIsa;

// The ISA the kernels below use on this CPU (DSCORE_CPU_ISA=avx2|scalar
// lowers it, for tests and comparisons).
VectorIsa vector_isa();
inline const char* vector_isa_name(VectorIsa isa) { return sdk::cpu_isa_name(isa); }

// GPT-2's GELU, tanh form: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward_f32(float* out, const float* inp, int64_t n, VectorIsa isa = vector_isa());
// dinp = gelu'(inp) * dout (overwritten).
void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n,
                       VectorIsa isa = vector_isa());

// Llama's SwiGLU pieces, SiLU(x) = x sigmoid(x): out = silu(x) * m, and
// out = silu'(x) * m. out may alias m.
void silu_mul_f32(float* out, const float* x, const float* m, int64_t n,
                  VectorIsa isa = vector_isa());
void silu_grad_mul_f32(float* out, const float* x, const float* m, int64_t n,
                       VectorIsa isa = vector_isa());

// acc[i] += rows[r * stride + i] for r = 0..n_rows-1, i < n: column sums
// added row after row, so every ISA gives the same bits as the scalar loop.
void add_rows_f32(float* acc, const float* rows, int64_t n_rows, int64_t stride, int64_t n,
                  VectorIsa isa = vector_isa());

// One row's softmax in place, z = exp(z - max) / sum over its V values (V >
// 0), in T element by element; returns the row's log-sum-exp. The fp32 LM
// head's (linear.cc), and softmax_row_f32's without vector lanes.
template <typename T>
double softmax_row_scalar(T* z, int64_t V) {
  T mx = z[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, z[v]);
  T sum = 0;
  for (int64_t v = 0; v < V; ++v) {
    z[v] = std::exp(z[v] - mx);
    sum += z[v];
  }
  const T inv = static_cast<T>(1) / sum;
  for (int64_t v = 0; v < V; ++v) z[v] *= inv;
  return static_cast<double>(mx) + std::log(static_cast<double>(sum));
}

// The same for floats on 16 (AVX-512) or 8 (AVX2) lanes with libmvec's expf,
// the sum in fp32 lanes. Not the scalar loop's bits (another expf, another
// order of the sum): the bf16 LM head's, where a 32000-token vocabulary's
// scalar exps were 4-6% of the ~100M Llama's step.
double softmax_row_f32(float* z, int64_t V, VectorIsa isa = vector_isa());

// Asks for the cache lines of n floats from p, for a pass that reaches
// them a little later: an activation written in the forward and read back
// in the backward comes from memory, and the elementwise work on a row is
// too short for the hardware's prefetch to hide that (GELU's backward
// waited on its input for most of its time).
inline void prefetch_floats(const float* p, int64_t n) {
  constexpr int64_t kLineFloats = 16;
  for (int64_t i = 0; i < n; i += kLineFloats) __builtin_prefetch(p + i, 0, 3);
}

// dst[i] = src[i] for values nothing reads soon (an activation kept for
// the backward): streamed past the caches where dst is 64-byte aligned on
// AVX-512 (no read of dst's lines first, no eviction of what the caller
// works on), memcpy otherwise.
void copy_streaming_f32(float* dst, const float* src, int64_t n, VectorIsa isa = vector_isa());

}  // namespace dscore::transformer::cpu
