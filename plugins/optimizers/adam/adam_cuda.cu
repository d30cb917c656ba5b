// The multi-tensor CUDA Adam kernel (adam_cuda.h). Like apex/DeepSpeed's
// multi_tensor_apply: the tensor pointers and a block -> (tensor, chunk)
// table travel in the kernel's parameter block (< 4 KiB), each block updates
// one chunk of 65536 elements with 16-byte loads where the tensor's buffers
// are aligned. The element math spells out every rounding with __f*_rn
// intrinsics in adam_element's order (adam_update.h), so nvcc's default FMA
// contraction cannot change it and the result equals the CPU path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "adam_cuda.h"

namespace dscore::adam {
namespace {

constexpr int kMaxTensorsPerLaunch = 36;
constexpr int kMaxBlocksPerLaunch = 320;
constexpr int64_t kChunk = 65536;
constexpr int kThreads = 512;

struct LaunchList {
  float* param[kMaxTensorsPerLaunch];
  const void* grad[kMaxTensorsPerLaunch];
  float* exp_avg[kMaxTensorsPerLaunch];
  float* exp_avg_sq[kMaxTensorsPerLaunch];
  void* param_16bit[kMaxTensorsPerLaunch];
  int64_t numel[kMaxTensorsPerLaunch];
  unsigned char vectorised[kMaxTensorsPerLaunch];  // every buffer 16-byte aligned
  unsigned char block_tensor[kMaxBlocksPerLaunch];
  int32_t block_chunk[kMaxBlocksPerLaunch];
};
static_assert(sizeof(LaunchList) + sizeof(AdamConstants) <= 4096, "kernel parameters > 4 KiB");

template <bool kAdamW>
__device__ __forceinline__ void element(const AdamConstants& k, float g_raw, float& p, float& m,
                                        float& v) {
  const float one_minus_beta1 = __fsub_rn(1.0f, k.beta1);
  const float one_minus_beta2 = __fsub_rn(1.0f, k.beta2);
  float g = __fmul_rn(g_raw, k.grad_scale);
  if (!kAdamW) g = __fmaf_rn(k.weight_decay, p, g);
  m = __fmaf_rn(k.beta1, m, __fmul_rn(one_minus_beta1, g));
  v = __fmaf_rn(k.beta2, v, __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, k.bias_correction2)), k.eps);
  float update = __fdiv_rn(__fdiv_rn(m, k.bias_correction1), denom);
  if (kAdamW) update = __fmaf_rn(k.weight_decay, p, update);
  p = __fmaf_rn(-k.lr, update, p);
}

template <dscore_dtype G>
__device__ __forceinline__ float load1(const void* grad, int64_t i) {
  if constexpr (G == DSCORE_DTYPE_F32) {
    return static_cast<const float*>(grad)[i];
  } else if constexpr (G == DSCORE_DTYPE_BF16) {
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(grad)[i]) << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(grad)[i]));
  }
}

template <dscore_dtype G>
__device__ __forceinline__ void load4(const void* grad, int64_t i, float out[4]) {
  if constexpr (G == DSCORE_DTYPE_F32) {
    const float4 x = *reinterpret_cast<const float4*>(static_cast<const float*>(grad) + i);
    out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
  } else {
    const uint2 x = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(grad) + i);
    const uint16_t h[4] = {static_cast<uint16_t>(x.x), static_cast<uint16_t>(x.x >> 16),
                           static_cast<uint16_t>(x.y), static_cast<uint16_t>(x.y >> 16)};
    for (int j = 0; j < 4; ++j)
      out[j] = G == DSCORE_DTYPE_BF16 ? __uint_as_float(static_cast<uint32_t>(h[j]) << 16)
                                      : __half2float(__ushort_as_half(h[j]));
  }
}

template <dscore_dtype P16>
__device__ __forceinline__ uint16_t to_16bit(float p) {
  if constexpr (P16 == DSCORE_DTYPE_BF16)
    return __bfloat16_as_ushort(__float2bfloat16_rn(p));
  else
    return __half_as_ushort(__float2half_rn(p));
}

template <dscore_dtype P16>
__device__ __forceinline__ void store1(void* out, int64_t i, float p) {
  if constexpr (P16 == DSCORE_DTYPE_F32) {
    static_cast<float*>(out)[i] = p;
  } else if constexpr (P16 != DSCORE_DTYPE_INVALID) {
    static_cast<uint16_t*>(out)[i] = to_16bit<P16>(p);
  }
}

template <dscore_dtype P16>
__device__ __forceinline__ void store4(void* out, int64_t i, const float p[4]) {
  if constexpr (P16 == DSCORE_DTYPE_F32) {
    *reinterpret_cast<float4*>(static_cast<float*>(out) + i) = make_float4(p[0], p[1], p[2], p[3]);
  } else if constexpr (P16 != DSCORE_DTYPE_INVALID) {
    uint2 x;
    x.x = to_16bit<P16>(p[0]) | (static_cast<uint32_t>(to_16bit<P16>(p[1])) << 16);
    x.y = to_16bit<P16>(p[2]) | (static_cast<uint32_t>(to_16bit<P16>(p[3])) << 16);
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(out) + i) = x;
  }
}

template <dscore_dtype G, dscore_dtype P16, bool kAdamW>
__global__ void __launch_bounds__(kThreads) adam_kernel(LaunchList list, AdamConstants k) {
  const int t = list.block_tensor[blockIdx.x];
  const int64_t offset = static_cast<int64_t>(list.block_chunk[blockIdx.x]) * kChunk;
  const int64_t n = list.numel[t] - offset < kChunk ? list.numel[t] - offset : kChunk;
  float* param = list.param[t] + offset;
  float* exp_avg = list.exp_avg[t] + offset;
  float* exp_avg_sq = list.exp_avg_sq[t] + offset;
  const size_t gsize = G == DSCORE_DTYPE_F32 ? 4 : 2;
  const void* grad = static_cast<const char*>(list.grad[t]) + offset * gsize;
  const size_t osize = P16 == DSCORE_DTYPE_F32 ? 4 : 2;
  void* out = list.param_16bit[t] == nullptr
                  ? nullptr
                  : static_cast<char*>(list.param_16bit[t]) + offset * osize;
  int64_t scalar_begin = 0;
  if (list.vectorised[t]) {
    for (int64_t i = 4 * static_cast<int64_t>(threadIdx.x); i + 4 <= n; i += 4 * blockDim.x) {
      const float4 p4 = *reinterpret_cast<const float4*>(param + i);
      const float4 m4 = *reinterpret_cast<const float4*>(exp_avg + i);
      const float4 v4 = *reinterpret_cast<const float4*>(exp_avg_sq + i);
      float p[4] = {p4.x, p4.y, p4.z, p4.w}, m[4] = {m4.x, m4.y, m4.z, m4.w},
            v[4] = {v4.x, v4.y, v4.z, v4.w}, g[4];
      load4<G>(grad, i, g);
#pragma unroll
      for (int j = 0; j < 4; ++j) element<kAdamW>(k, g[j], p[j], m[j], v[j]);
      *reinterpret_cast<float4*>(param + i) = make_float4(p[0], p[1], p[2], p[3]);
      *reinterpret_cast<float4*>(exp_avg + i) = make_float4(m[0], m[1], m[2], m[3]);
      *reinterpret_cast<float4*>(exp_avg_sq + i) = make_float4(v[0], v[1], v[2], v[3]);
      store4<P16>(out, i, p);
    }
    scalar_begin = n / 4 * 4;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < n; i += blockDim.x) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    element<kAdamW>(k, load1<G>(grad, i), p, m, v);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    store1<P16>(out, i, p);
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <dscore_dtype G, dscore_dtype P16>
void launch(const LaunchList& list, int blocks, const AdamConstants& k, cudaStream_t stream) {
  if (k.adamw)
    adam_kernel<G, P16, true><<<blocks, kThreads, 0, stream>>>(list, k);
  else
    adam_kernel<G, P16, false><<<blocks, kThreads, 0, stream>>>(list, k);
}

}  // namespace

void adam_step_cuda(const AdamConstants& k, const AdamTensor* tensors, size_t count, void* stream) {
  LaunchList list{};
  int tensors_in_list = 0, blocks = 0;
  dscore_dtype grad_dtype = DSCORE_DTYPE_INVALID, out16_dtype = DSCORE_DTYPE_INVALID;
  auto flush = [&] {
    if (blocks == 0) return;
    sdk::with_float_dtype(grad_dtype, [&](auto g) {
      sdk::with_output_dtype(out16_dtype, [&](auto o) {
        launch<decltype(g)::value, decltype(o)::value>(list, blocks, k,
                                                       static_cast<cudaStream_t>(stream));
      });
    });
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
      throw sdk::Error(DSCORE_INTERNAL, std::string("adam: CUDA kernel launch failed: ") +
                                            cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
    tensors_in_list = 0;
    blocks = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    const AdamTensor& t = tensors[i];
    if (t.numel == 0) continue;
    if (tensors_in_list > 0 && (t.grad_dtype != grad_dtype || t.out16_dtype != out16_dtype))
      flush();
    if (tensors_in_list == kMaxTensorsPerLaunch) flush();
    grad_dtype = t.grad_dtype;
    out16_dtype = t.out16_dtype;
    const int64_t chunks = (t.numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || tensors_in_list == 0) {  // (re)enter the tensor into the current list
        const int slot = tensors_in_list++;
        list.param[slot] = t.param;
        list.grad[slot] = t.grad;
        list.exp_avg[slot] = t.exp_avg;
        list.exp_avg_sq[slot] = t.exp_avg_sq;
        list.param_16bit[slot] = t.param_16bit;
        list.numel[slot] = t.numel;
        list.vectorised[slot] = aligned16(t.param) && aligned16(t.grad) && aligned16(t.exp_avg) &&
                                aligned16(t.exp_avg_sq) && aligned16(t.param_16bit);
      }
      list.block_tensor[blocks] = static_cast<unsigned char>(tensors_in_list - 1);
      list.block_chunk[blocks] = static_cast<int32_t>(c);
      if (++blocks == kMaxBlocksPerLaunch) flush();
    }
  }
  flush();
}

}  // namespace dscore::adam
