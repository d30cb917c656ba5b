// Optional header-only helpers for 16-bit floats and float tensors, shared by
// plugins and the host. Nothing here crosses the ABI. Conversions round to
// nearest even and keep NaN and infinity, as the hardware does.
#ifndef DSCORE_CPP_DTYPE_HPP_
#define DSCORE_CPP_DTYPE_HPP_

#include <dscore/plugin.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace dscore::sdk {

// Bytes per element of a dtype, 0 for DSCORE_DTYPE_INVALID or unknown values.
inline size_t dtype_size(dscore_dtype dtype) {
  switch (dtype) {
    case DSCORE_DTYPE_F64:
    case DSCORE_DTYPE_I64:
    case DSCORE_DTYPE_U64:
      return 8;
    case DSCORE_DTYPE_F32:
    case DSCORE_DTYPE_I32:
    case DSCORE_DTYPE_U32:
      return 4;
    case DSCORE_DTYPE_F16:
    case DSCORE_DTYPE_BF16:
    case DSCORE_DTYPE_I16:
    case DSCORE_DTYPE_U16:
      return 2;
    case DSCORE_DTYPE_I8:
    case DSCORE_DTYPE_U8:
    case DSCORE_DTYPE_BOOL:
      return 1;
    default:
      return 0;
  }
}

inline const char* dtype_name(dscore_dtype dtype) {
  switch (dtype) {
    case DSCORE_DTYPE_F32:
      return "fp32";
    case DSCORE_DTYPE_F16:
      return "fp16";
    case DSCORE_DTYPE_BF16:
      return "bf16";
    case DSCORE_DTYPE_F64:
      return "fp64";
    case DSCORE_DTYPE_I8:
      return "int8";
    case DSCORE_DTYPE_U8:
      return "uint8";
    case DSCORE_DTYPE_I16:
      return "int16";
    case DSCORE_DTYPE_U16:
      return "uint16";
    case DSCORE_DTYPE_I32:
      return "int32";
    case DSCORE_DTYPE_U32:
      return "uint32";
    case DSCORE_DTYPE_I64:
      return "int64";
    case DSCORE_DTYPE_U64:
      return "uint64";
    case DSCORE_DTYPE_BOOL:
      return "bool";
    default:
      return "invalid";
  }
}

// ---- dtype helpers: 16-bit floats are stored, fp32 is computed ----

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN (made quiet). Without branches, so
// loops over it vectorise.
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded);
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, overflow to infinity, NaN stays NaN.
inline uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u)
      return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 + (113 - exp): aligns to 2^-24 units
    uint32_t value = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

// Element i of a float tensor (f32, f16, bf16, f64) as float.
inline float load_float(const dscore_tensor* t, int64_t i) {
  switch (t->dtype) {
    case DSCORE_DTYPE_F32:
      return static_cast<const float*>(t->data)[i];
    case DSCORE_DTYPE_F16:
      return half_to_float(static_cast<const uint16_t*>(t->data)[i]);
    case DSCORE_DTYPE_BF16:
      return bf16_to_float(static_cast<const uint16_t*>(t->data)[i]);
    case DSCORE_DTYPE_F64:
      return static_cast<float>(static_cast<const double*>(t->data)[i]);
    default:
      throw std::invalid_argument("tensor is not a floating-point tensor");
  }
}

// Writes through t->data; the view itself may be const (a borrowed batch).
inline void store_float(const dscore_tensor* t, int64_t i, float v) {
  switch (t->dtype) {
    case DSCORE_DTYPE_F32:
      static_cast<float*>(t->data)[i] = v;
      return;
    case DSCORE_DTYPE_F16:
      static_cast<uint16_t*>(t->data)[i] = float_to_half(v);
      return;
    case DSCORE_DTYPE_BF16:
      static_cast<uint16_t*>(t->data)[i] = float_to_bf16(v);
      return;
    case DSCORE_DTYPE_F64:
      static_cast<double*>(t->data)[i] = v;
      return;
    default:
      throw std::invalid_argument("tensor is not a floating-point tensor");
  }
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_DTYPE_HPP_
