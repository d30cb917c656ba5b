// Rounding fp32 to bf16 (to nearest even, as sdk's float_to_bf16, with the
// same bits on every path) for the bf16 GEMM's operands and accumulators:
// avx512_bf16's conversion where the CPU has it, AVX-512 integer steps
// where it has AVX-512, a loop the compiler vectorises elsewhere.
#pragma once

#include <cstdint>

#include "aligned.h"

namespace dscore::transformer::cpu {

// out[i] = in[i] rounded to bf16, to nearest even (as sdk's float_to_bf16),
// over TBB blocks.
void round_to_bf16(uint16_t* out, const float* in, int64_t n);
// The same on the calling thread.
void round_to_bf16_serial(uint16_t* out, const float* in, int64_t n);
// out[i] = bf16(float(out[i]) + in[i]), rounded once as above, over TBB
// blocks: an fp32 gradient added into a bf16 accumulator.
void add_to_bf16(uint16_t* out, const float* in, int64_t n);
// round_to_bf16 into `buffer`, grown to n elements first (what it held
// before is not kept); returns its data. For operand buffers reused from
// call to call.
const uint16_t* round_to_bf16(AlignedVector<uint16_t>& buffer, const float* in, int64_t n);

}  // namespace dscore::transformer::cpu
