// ZeRO++'s quantized collectives (DeepSpeed's zero_quantized_weights and
// zero_quantized_gradients): symmetric blockwise quantization of a flat run
// of values into one byte buffer that travels as bytes.
//
// A quantized run of n values is the codes (int8: n bytes; int4: two per
// byte, low nibble first) followed by one fp32 scale per block, padded to 8
// bytes. A block's scale is its largest magnitude over the code range (127
// or 7); a value is its code times the scale, the code rounded to nearest
// and clamped. An all-zero block has scale 0. The error bound per value is
// half a step of its block: max|block| / 254 for int8, / 14 for int4.
//
// Blocks: int8 weights 4096 values (DeepSpeed's qwZ picks 4-8k per group);
// int4 gradients 256 (DeepSpeed's qgZ groups about a row of each matrix; a
// flat chunk mixes rows, and at 4096 the quick-start gpt's loss after 100
// bf16 steps at 4 ranks was 1.630 against 1.499 without qgZ; at 256, 1.506,
// for 3% more bytes than codes alone).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>

namespace dscore::zero {

enum class QuantBits { kInt8 = 8, kInt4 = 4 };

// Values per scale.
int64_t quant_block(QuantBits bits);

// Bytes of a quantized run of n values.
int64_t quantized_bytes(int64_t n, QuantBits bits);

// n float values of `dtype` (fp32, fp16, bf16) into `out` (quantized_bytes).
void quantize(const void* src, dscore_dtype dtype, int64_t n, QuantBits bits, char* out);
// Back into n values of `dtype`.
void dequantize(const char* in, int64_t n, QuantBits bits, void* dst, dscore_dtype dtype);
// dst[i] += the dequantized value (fp32 accumulation).
void dequantize_add(const char* in, int64_t n, QuantBits bits, float* dst);

}  // namespace dscore::zero
