#include "core/zero/quantization.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/tensor/dtype_ops.h"

namespace dscore::zero {
namespace {

int64_t code_bytes(int64_t n, QuantBits bits) { return bits == QuantBits::kInt8 ? n : (n + 1) / 2; }

int64_t blocks(int64_t n, QuantBits bits) {
  const int64_t block = quant_block(bits);
  return (n + block - 1) / block;
}

float code_range(QuantBits bits) { return bits == QuantBits::kInt8 ? 127.0f : 7.0f; }

float* scales_of(char* run, int64_t n, QuantBits bits) {
  return reinterpret_cast<float*>(run + ((code_bytes(n, bits) + 7) / 8) * 8);
}

// Code `i` of a run.
int code_at(const char* codes, int64_t i, QuantBits bits) {
  if (bits == QuantBits::kInt8) return static_cast<int8_t>(codes[i]);
  const uint8_t byte = static_cast<uint8_t>(codes[i / 2]);
  const int nibble = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;  // two's complement in 4 bits
}

// Calls f(value index, code, scale) for every value of the run.
template <typename F>
void for_each_code(const char* in, int64_t n, QuantBits bits, F f) {
  const float* scales = scales_of(const_cast<char*>(in), n, bits);
  const int64_t block = quant_block(bits);
  for (int64_t b = 0; b < blocks(n, bits); ++b) {
    const float scale = scales[b];
    const int64_t end = std::min(n, (b + 1) * block);
    for (int64_t i = b * block; i < end; ++i) f(i, code_at(in, i, bits), scale);
  }
}

}  // namespace

int64_t quant_block(QuantBits bits) { return bits == QuantBits::kInt8 ? 4096 : 256; }

int64_t quantized_bytes(int64_t n, QuantBits bits) {
  return ((code_bytes(n, bits) + 7) / 8) * 8 +
         blocks(n, bits) * static_cast<int64_t>(sizeof(float));
}

void quantize(const void* src, dscore_dtype dtype, int64_t n, QuantBits bits, char* out) {
  const int64_t block = quant_block(bits);
  std::vector<float> values(static_cast<size_t>(std::min(n, block)));
  float* scales = scales_of(out, n, bits);
  const float range = code_range(bits);
  std::memset(out, 0, static_cast<size_t>(code_bytes(n, bits)));
  const size_t es = sdk::dtype_size(dtype);
  for (int64_t b = 0; b < blocks(n, bits); ++b) {
    const int64_t first = b * block, count = std::min(n - first, block);
    tensor::convert(static_cast<const char*>(src) + static_cast<size_t>(first) * es, dtype,
                    values.data(), DSCORE_DTYPE_F32, count);
    float absmax = 0;
    for (int64_t i = 0; i < count; ++i) absmax = std::max(absmax, std::fabs(values[i]));
    const float scale = absmax / range;
    scales[b] = scale;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      const int code =
          static_cast<int>(std::clamp(std::nearbyint(values[i] * inverse), -range, range));
      const int64_t at = first + i;
      if (bits == QuantBits::kInt8) {
        out[at] = static_cast<char>(static_cast<int8_t>(code));
      } else {
        const auto nibble = static_cast<uint8_t>(code & 0xF);
        out[at / 2] = static_cast<char>(static_cast<uint8_t>(out[at / 2]) |
                                        (at % 2 == 0 ? nibble : static_cast<uint8_t>(nibble << 4)));
      }
    }
  }
}

void dequantize(const char* in, int64_t n, QuantBits bits, void* dst, dscore_dtype dtype) {
  if (dtype == DSCORE_DTYPE_F32) {
    float* out = static_cast<float*>(dst);
    for_each_code(in, n, bits, [&](int64_t i, int code, float scale) { out[i] = code * scale; });
    return;
  }
  std::vector<float> values(static_cast<size_t>(n));
  for_each_code(in, n, bits, [&](int64_t i, int code, float scale) { values[i] = code * scale; });
  tensor::convert(values.data(), DSCORE_DTYPE_F32, dst, dtype, n);
}

void dequantize_add(const char* in, int64_t n, QuantBits bits, float* dst) {
  for_each_code(in, n, bits, [&](int64_t i, int code, float scale) { dst[i] += code * scale; });
}

}  // namespace dscore::zero
