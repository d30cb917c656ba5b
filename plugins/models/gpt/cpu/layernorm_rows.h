// LayerNorm on one fp32 row with AVX2 + FMA (kernels.cc uses these where
// the CPU has them; the scalar template stays for other CPUs and for
// T = double). The sums over a row run in 8 lanes, added across lanes at
// the end, so a result differs from the scalar loop's in the last bits
// (same elementwise formulas, a different summation order); it does not
// depend on the row's position or the thread count.
#pragma once

#include <cstdint>

namespace dscore::gpt::cpu {

// True where the CPU has AVX2 and FMA and DSCORE_CPU_ISA does not lower it.
bool layernorm_rows_vectorized();

// out = (x - mean) * rstd * weight + bias; returns mean and rstd.
void layernorm_forward_row_avx2(float* out, float* mean, float* rstd, const float* x,
                                const float* weight, const float* bias, int64_t C, float eps);
// dx += the input gradient; dweight += norm * d; dbias += d.
void layernorm_backward_row_avx2(float* dx, float* dweight, float* dbias, const float* d,
                                 const float* x, const float* weight, float mean, float rstd,
                                 int64_t C);

}  // namespace dscore::gpt::cpu
