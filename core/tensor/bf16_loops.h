// The bf16 loops of dtype_ops.h (accumulate, scale, convert to and from
// fp32) on AVX-512 or AVX2 where the CPU has them, picked once at run time
// (DSCORE_CPU_ISA lowers the choice). Every ISA gives the bits of the
// scalar sdk::float_to_bf16 / bf16_to_float: fp32 arithmetic, one rounding
// to nearest even per result, NaN kept (made quiet). They are the ZeRO
// gradient path's per-step passes over bf16 buffers (a bucket added into
// the owned partition, a master's conversion), which the scalar loops made
// 2-4% of a bf16 step at stage 2.
#pragma once

#include <dscore/cpp/cpu_isa.hpp>

#include <cstdint>

namespace dscore::tensor {

// dst[i] = bf16(f32(dst[i]) + f32(src[i])).
void bf16_accumulate(uint16_t* dst, const uint16_t* src, int64_t n, sdk::CpuIsa isa);
// data[i] = bf16(f32(data[i]) * factor).
void bf16_scale(uint16_t* data, int64_t n, float factor, sdk::CpuIsa isa);
void bf16_to_f32(float* dst, const uint16_t* src, int64_t n, sdk::CpuIsa isa);
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, sdk::CpuIsa isa);

// The widest vector ISA this CPU has, lowered by DSCORE_CPU_ISA: the one
// core/tensor's loops take (these in dtype_ops.h, and square_sum.h's).
sdk::CpuIsa tensor_loops_isa();

}  // namespace dscore::tensor
