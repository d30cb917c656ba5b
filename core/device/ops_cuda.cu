// The CUDA backend of core/device/ops.h. Elementwise ops are grid-stride
// kernels whose every rounding is spelled out (__f*_rn, and the 16-bit
// conversions below as bit operations identical to the host's in
// dscore/cpp/dtype.hpp, NaN payloads included), so they write the bytes the
// CPU writes. The sum of squares is a two-pass, fixed-shape tree of
// TwoSum-compensated pairs in double (no atomics): deterministic for a given
// n on any GPU, and within one double ulp of tensor::sum_squares.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/device/ops_backends.h"

namespace dscore::device::ops::cuda {
namespace {

// One check for every CUDA runtime call: names the call, file and line.
void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw std::runtime_error(std::string("device::ops: ") + call +
                           " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) +
                           " (" + file + ":" + std::to_string(line) + ")");
}
#define DSCORE_OPS_CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)
#define DSCORE_OPS_LAUNCHED(kernel) check(cudaGetLastError(), kernel, __FILE__, __LINE__)

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

constexpr int kThreads = 256;

int elementwise_blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

// ---- 16-bit formats: the host's bit operations (dtype.hpp), on the device.

__device__ __forceinline__ float bf16_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__device__ __forceinline__ float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
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
  return __uint_as_float(bits);
}

__device__ __forceinline__ uint16_t float_to_half(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;
    uint32_t value = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

template <dscore_dtype D>
__device__ __forceinline__ float load(const void* p, int64_t i) {
  if constexpr (D == DSCORE_DTYPE_F32)
    return static_cast<const float*>(p)[i];
  else if constexpr (D == DSCORE_DTYPE_BF16)
    return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  else
    return half_to_float(static_cast<const uint16_t*>(p)[i]);
}

template <dscore_dtype D>
__device__ __forceinline__ void store(void* p, int64_t i, float v) {
  if constexpr (D == DSCORE_DTYPE_F32)
    static_cast<float*>(p)[i] = v;
  else if constexpr (D == DSCORE_DTYPE_BF16)
    static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
  else
    static_cast<uint16_t*>(p)[i] = float_to_half(v);
}

// Calls fn with std::integral_constant-like tags for a float dtype (checked
// by the dispatch before it gets here).
template <dscore_dtype D>
struct Tag {
  static constexpr dscore_dtype value = D;
};

template <typename Fn>
void with_dtype(dscore_dtype dtype, Fn&& fn) {
  switch (dtype) {
    case DSCORE_DTYPE_F32:
      return fn(Tag<DSCORE_DTYPE_F32>{});
    case DSCORE_DTYPE_BF16:
      return fn(Tag<DSCORE_DTYPE_BF16>{});
    case DSCORE_DTYPE_F16:
      return fn(Tag<DSCORE_DTYPE_F16>{});
    default:
      throw std::logic_error("device::ops (cuda): dtype not checked by the dispatch");
  }
}

size_t element_bytes(dscore_dtype dtype) {
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
    default:
      return 1;
  }
}

// ---- elementwise kernels

template <dscore_dtype S, dscore_dtype D>
__global__ void convert_kernel(const void* src, void* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store<D>(dst, i, load<S>(src, i));
}

template <dscore_dtype D>
__global__ void scale_kernel(void* data, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store<D>(data, i, __fmul_rn(load<D>(data, i), factor));
}

template <dscore_dtype D>
__global__ void accumulate_kernel(void* dst, const void* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store<D>(dst, i, __fadd_rn(load<D>(dst, i), load<D>(src, i)));
}

template <dscore_dtype D, dscore_dtype S>
__global__ void accumulate_into_kernel(void* dst, const void* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store<D>(dst, i, __fadd_rn(load<D>(dst, i), load<S>(src, i)));
}

// ---- the sum of squares

// tensor::SquareSum's arithmetic with every rounding explicit (no FMA
// contraction can change a TwoSum).
struct Pair {
  double hi;
  double lo;
  int non_finite;
};

__device__ __forceinline__ void two_sum_add(Pair& s, double x) {
  const double sum = __dadd_rn(s.hi, x);
  const double bp = __dsub_rn(sum, s.hi);
  const double e = __dadd_rn(__dsub_rn(s.hi, __dsub_rn(sum, bp)), __dsub_rn(x, bp));
  s.hi = sum;
  s.lo = __dadd_rn(s.lo, e);
}

__device__ __forceinline__ void merge(Pair& s, const Pair& other) {
  two_sum_add(s, other.hi);
  two_sum_add(s, other.lo);
  s.non_finite |= other.non_finite;
}

// Blocks of the first pass: a function of n only, so the tree's shape (and
// with it every rounding) is the same on every GPU.
constexpr int kSumThreads = 256;
constexpr int64_t kSumPerThread = 64;
constexpr int kSumMaxBlocks = 1024;

int sum_blocks(int64_t n) {
  const int64_t per_block = kSumThreads * kSumPerThread;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<int>(blocks < kSumMaxBlocks ? (blocks > 0 ? blocks : 1) : kSumMaxBlocks);
}

// Merges the block's pairs in shared memory: a halving tree of fixed shape.
__device__ Pair block_merge(Pair mine) {
  __shared__ double hi[kSumThreads];
  __shared__ double lo[kSumThreads];
  __shared__ int bad[kSumThreads];
  const int t = threadIdx.x;
  hi[t] = mine.hi, lo[t] = mine.lo, bad[t] = mine.non_finite;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      Pair a{hi[t], lo[t], bad[t]};
      merge(a, Pair{hi[t + stride], lo[t + stride], bad[t + stride]});
      hi[t] = a.hi, lo[t] = a.lo, bad[t] = a.non_finite;
    }
    __syncthreads();
  }
  return Pair{hi[0], lo[0], bad[0]};
}

template <dscore_dtype D>
__global__ void __launch_bounds__(kSumThreads)
    sum_squares_blocks(const void* data, int64_t n, SquareSumResult* partial) {
  Pair mine{0.0, 0.0, 0};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kSumThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kSumThreads) {
    const float v = load<D>(data, i);
    mine.non_finite |= !isfinite(v);
    two_sum_add(mine, __dmul_rn(static_cast<double>(v), static_cast<double>(v)));
  }
  const Pair block = block_merge(mine);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = SquareSumResult{block.hi, block.lo, block.non_finite, 0};
}

__global__ void __launch_bounds__(kSumThreads)
    sum_squares_final(const SquareSumResult* partial, int count, SquareSumResult* out) {
  Pair mine{0.0, 0.0, 0};
  for (int b = threadIdx.x; b < count; b += kSumThreads)
    merge(mine, Pair{partial[b].hi, partial[b].lo, partial[b].non_finite});
  const Pair total = block_merge(mine);
  if (threadIdx.x == 0) {
    // As the host: non-finite also when the sum itself is.
    const int bad = total.non_finite || !isfinite(total.hi) || !isfinite(total.lo);
    *out = SquareSumResult{total.hi, total.lo, bad, 0};
  }
}

}  // namespace

void convert(const void* src, dscore_dtype src_dtype, void* dst, dscore_dtype dst_dtype, int64_t n,
             void* stream) {
  if (src_dtype == dst_dtype) return copy(dst, src, src_dtype, n, stream);
  with_dtype(src_dtype, [&](auto s) {
    with_dtype(dst_dtype, [&](auto d) {
      if constexpr (decltype(s)::value != decltype(d)::value)
        convert_kernel<decltype(s)::value, decltype(d)::value>
            <<<elementwise_blocks(n), kThreads, 0, as_stream(stream)>>>(src, dst, n);
    });
  });
  DSCORE_OPS_LAUNCHED("convert_kernel");
}

void fill_zero(void* data, dscore_dtype dtype, int64_t n, void* stream) {
  DSCORE_OPS_CUDA_CHECK(
      cudaMemsetAsync(data, 0, static_cast<size_t>(n) * element_bytes(dtype), as_stream(stream)));
}

void scale_in_place(void* data, dscore_dtype dtype, int64_t n, double factor, void* stream) {
  if (factor == 1.0) return;
  const float f = static_cast<float>(factor);  // as the host: rounded once
  with_dtype(dtype, [&](auto d) {
    scale_kernel<decltype(d)::value>
        <<<elementwise_blocks(n), kThreads, 0, as_stream(stream)>>>(data, n, f);
  });
  DSCORE_OPS_LAUNCHED("scale_kernel");
}

void accumulate(void* dst, const void* src, dscore_dtype dtype, int64_t n, void* stream) {
  with_dtype(dtype, [&](auto d) {
    accumulate_kernel<decltype(d)::value>
        <<<elementwise_blocks(n), kThreads, 0, as_stream(stream)>>>(dst, src, n);
  });
  DSCORE_OPS_LAUNCHED("accumulate_kernel");
}

void accumulate_into(void* dst, dscore_dtype dst_dtype, const void* src, dscore_dtype src_dtype,
                     int64_t n, void* stream) {
  with_dtype(dst_dtype, [&](auto d) {
    with_dtype(src_dtype, [&](auto s) {
      accumulate_into_kernel<decltype(d)::value, decltype(s)::value>
          <<<elementwise_blocks(n), kThreads, 0, as_stream(stream)>>>(dst, src, n);
    });
  });
  DSCORE_OPS_LAUNCHED("accumulate_into_kernel");
}

void copy(void* dst, const void* src, dscore_dtype dtype, int64_t n, void* stream) {
  if (dst == src) return;
  DSCORE_OPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * element_bytes(dtype),
                                        cudaMemcpyDefault, as_stream(stream)));
}

size_t sum_squares_workspace_bytes() { return kSumMaxBlocks * sizeof(SquareSumResult); }

void sum_squares(const void* data, dscore_dtype dtype, int64_t n, SquareSumResult* out,
                 void* workspace, void* stream) {
  auto* partial = static_cast<SquareSumResult*>(workspace);
  const int blocks = sum_blocks(n);
  with_dtype(dtype, [&](auto d) {
    sum_squares_blocks<decltype(d)::value>
        <<<blocks, kSumThreads, 0, as_stream(stream)>>>(data, n, partial);
  });
  DSCORE_OPS_LAUNCHED("sum_squares_blocks");
  sum_squares_final<<<1, kSumThreads, 0, as_stream(stream)>>>(partial, blocks, out);
  DSCORE_OPS_LAUNCHED("sum_squares_final");
}

}  // namespace dscore::device::ops::cuda
