// ZeRO++'s quantized collectives (DeepSpeed's zero_quantized_weights and
// zero_quantized_gradients): symmetric blockwise quantization of a flat run
// of values into one byte buffer that travels as bytes.
//
// A quantized run of n values is the codes (int8: n bytes; int4: two per
// byte, low nibble first) followed by one fp32 scale per block of
// kQuantBlock values, padded to 8 bytes. A block's scale is its largest
// magnitude over the code range (127 or 7); a value is its code times the
// scale, the code rounded to nearest and clamped. An all-zero block has
// scale 0. The blocks are DeepSpeed's groups (it picks 4-8k values per
// group by tensor size; this is 4096 always), so the error bound per value
// is half a step of its block: max|block| / 254 for int8, / 14 for int4.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>

namespace dscore::zero {

constexpr int64_t kQuantBlock = 4096;

enum class QuantBits { kInt8 = 8, kInt4 = 4 };

// Bytes of a quantized run of n values.
int64_t quantized_bytes(int64_t n, QuantBits bits);

// n float values of `dtype` (fp32, fp16, bf16) into `out` (quantized_bytes).
void quantize(const void* src, dscore_dtype dtype, int64_t n, QuantBits bits, char* out);
// Back into n values of `dtype`.
void dequantize(const char* in, int64_t n, QuantBits bits, void* dst, dscore_dtype dtype);
// dst[i] += the dequantized value (fp32 accumulation).
void dequantize_add(const char* in, int64_t n, QuantBits bits, float* dst);

}  // namespace dscore::zero
