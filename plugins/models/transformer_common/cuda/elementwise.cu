// The GPT model's elementwise CUDA kernels (cuda_kernels.h): dtype conversion of
// uploaded parameters, the token/position embedding forward and its
// deterministic backward, bias broadcast, GELU and adds. Large elementwise
// maps move 16 bytes per load where the buffers allow.
#include <cuda_fp16.h>

#include "cuda_kernels.h"
#include "device_math.cuh"

namespace dscore::gpt::gpu {

using namespace transformer::gpu;  // NOLINT: the shared device helpers

namespace {

constexpr int kThreads = 256;

template <typename S>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(S);
  S v[kN];
};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// out[i] = op(a[i], b[i]) (b null: op(a[i], 0)), in fp32, rounded once.
template <typename S, typename Op>
__global__ void map_kernel(S* out, const S* a, const S* b, int64_t n, bool vectorised, Op op) {
  constexpr int kN = Pack<S>::kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail = 0;
  if (vectorised) {
    const int64_t packs = n / kN;
    for (int64_t p = first; p < packs; p += stride) {
      const Pack<S> x = reinterpret_cast<const Pack<S>*>(a)[p];
      const Pack<S> y = b != nullptr ? reinterpret_cast<const Pack<S>*>(b)[p] : x;
      Pack<S> r;
#pragma unroll
      for (int j = 0; j < kN; ++j)
        r.v[j] = from_float<S>(op(to_float(x.v[j]), b != nullptr ? to_float(y.v[j]) : 0.0f));
      reinterpret_cast<Pack<S>*>(out)[p] = r;
    }
    tail = packs * kN;
  }
  for (int64_t i = tail + first; i < n; i += stride)
    out[i] = from_float<S>(op(to_float(a[i]), b != nullptr ? to_float(b[i]) : 0.0f));
}

template <typename S, typename Op>
cudaError_t map(S* out, const S* a, const S* b, int64_t n, cudaStream_t stream, Op op) {
  if (n <= 0) return launched();
  const bool vectorised = aligned16(out) && aligned16(a) && (b == nullptr || aligned16(b));
  const int64_t items = vectorised ? (n + Pack<S>::kN - 1) / Pack<S>::kN : n;
  map_kernel<<<grid_for(items, kThreads), kThreads, 0, stream>>>(out, a, b, n, vectorised, op);
  return launched();
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

struct GeluForward {
  __device__ float operator()(float x, float) const {
    return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
  }
};
struct GeluBackward {
  __device__ float operator()(float x, float dout) const {
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    return (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout;
  }
};
struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};

__device__ __forceinline__ float load_host_type(const void* src, HostType type, int64_t i) {
  if (type == HostType::kF32) return static_cast<const float*>(src)[i];
  const unsigned short bits = static_cast<const unsigned short*>(src)[i];
  if (type == HostType::kBf16) return __uint_as_float(static_cast<unsigned int>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

template <typename S>
__global__ void convert_kernel(S* dst, const void* src, HostType type, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<S>(load_host_type(src, type, i));
}

template <typename S>
__global__ void add_float_kernel(S* dst, const float* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<S>(to_float(dst[i]) + src[i]);
}

template <typename S>
__global__ void add_into_kernel(void* dst, HostType type, const S* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float sum = load_host_type(dst, type, i) + to_float(src[i]);
    if (type == HostType::kF32)
      static_cast<float*>(dst)[i] = sum;
    else if (type == HostType::kBf16)
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(sum);
    else
      static_cast<__half*>(dst)[i] = __float2half_rn(sum);
  }
}

template <typename S>
__global__ void encoder_forward_kernel(S* out, const int32_t* tokens, const S* wte, const S* wpe,
                                       int64_t N, int64_t T, int64_t C) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    const int64_t token = tokens[r] < 0 ? 0 : tokens[r];
    out[i] = from_float<S>(to_float(wte[token * C + c]) + to_float(wpe[(r % T) * C + c]));
  }
}

// One thread per (t, c): the B rows of position t in order.
template <typename S>
__global__ void encoder_dwpe_kernel(S* dwpe, const S* dout, int64_t B, int64_t T, int64_t C) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < T * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int64_t b = 0; b < B; ++b) acc += to_float(dout[b * T * C + i]);
    dwpe[i] = from_float<S>(to_float(dwpe[i]) + acc);
  }
}

// Block x = one distinct token; its threads own columns, so each element of
// dwte has exactly one writer and sums its rows in increasing order.
template <typename S>
__global__ void encoder_dwte_kernel(S* dwte, const S* dout, const int32_t* index, int64_t buckets,
                                    int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t k = blockIdx.x;
  const int64_t token = index[k];
  const int32_t* start = index + buckets;
  const int32_t* rows = index + 2 * buckets + 1;
  float acc = 0.0f;
  for (int32_t j = start[k]; j < start[k + 1]; ++j)
    acc += to_float(dout[static_cast<int64_t>(rows[j]) * C + c]);
  dwte[token * C + c] = from_float<S>(to_float(dwte[token * C + c]) + acc);
}

template <typename S>
__global__ void broadcast_rows_kernel(S* out, const S* bias, int64_t N, int64_t OC) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * OC;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

}  // namespace

cudaError_t probe_kernels() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, add_float_kernel<float>);
}

template <typename S>
cudaError_t convert(S* dst, const void* src, HostType type, int64_t n, cudaStream_t stream) {
  if (n <= 0) return launched();
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, type, n);
  return launched();
}

template <typename S>
cudaError_t encoder_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int64_t B,
                            int64_t T, int64_t C, cudaStream_t stream) {
  if (B * T * C <= 0) return launched();
  encoder_forward_kernel<<<grid_for(B * T * C, kThreads), kThreads, 0, stream>>>(out, tokens, wte,
                                                                                 wpe, B * T, T, C);
  return launched();
}

template <typename S>
cudaError_t encoder_dwpe(S* dwpe, const S* dout, int64_t B, int64_t T, int64_t C,
                         cudaStream_t stream) {
  if (T * C <= 0) return launched();
  encoder_dwpe_kernel<<<grid_for(T * C, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
  return launched();
}

template <typename S>
cudaError_t encoder_dwte(S* dwte, const S* dout, const int32_t* index, int64_t buckets, int64_t C,
                         cudaStream_t stream) {
  if (buckets <= 0 || C <= 0) return launched();
  constexpr int kColumns = 128;
  const dim3 grid(static_cast<unsigned int>(buckets),
                  static_cast<unsigned int>((C + kColumns - 1) / kColumns));
  encoder_dwte_kernel<<<grid, kColumns, 0, stream>>>(dwte, dout, index, buckets, C);
  return launched();
}

template <typename S>
cudaError_t broadcast_rows(S* out, const S* bias, int64_t N, int64_t OC, cudaStream_t stream) {
  if (N * OC <= 0) return launched();
  broadcast_rows_kernel<<<grid_for(N * OC, kThreads), kThreads, 0, stream>>>(out, bias, N, OC);
  return launched();
}

template <typename S>
cudaError_t gelu_forward(S* out, const S* inp, int64_t n, cudaStream_t stream) {
  return map(out, inp, static_cast<const S*>(nullptr), n, stream, GeluForward{});
}

template <typename S>
cudaError_t gelu_backward(S* dinp, const S* inp, const S* dout, int64_t n, cudaStream_t stream) {
  return map(dinp, inp, dout, n, stream, GeluBackward{});
}

template <typename S>
cudaError_t add(S* out, const S* a, const S* b, int64_t n, cudaStream_t stream) {
  return map(out, a, b, n, stream, Add{});
}

template <typename S>
cudaError_t add_float(S* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return launched();
  add_float_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  return launched();
}

template <typename S>
cudaError_t add_into(void* dst, HostType type, const S* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return launched();
  add_into_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, type, src, n);
  return launched();
}

#define DSCORE_GPT_INSTANTIATE(S)                                                              \
  template cudaError_t convert<S>(S*, const void*, HostType, int64_t, cudaStream_t);           \
  template cudaError_t encoder_forward<S>(S*, const int32_t*, const S*, const S*, int64_t,     \
                                          int64_t, int64_t, cudaStream_t);                     \
  template cudaError_t encoder_dwpe<S>(S*, const S*, int64_t, int64_t, int64_t, cudaStream_t); \
  template cudaError_t encoder_dwte<S>(S*, const S*, const int32_t*, int64_t, int64_t,         \
                                       cudaStream_t);                                          \
  template cudaError_t broadcast_rows<S>(S*, const S*, int64_t, int64_t, cudaStream_t);        \
  template cudaError_t gelu_forward<S>(S*, const S*, int64_t, cudaStream_t);                   \
  template cudaError_t gelu_backward<S>(S*, const S*, const S*, int64_t, cudaStream_t);        \
  template cudaError_t add<S>(S*, const S*, const S*, int64_t, cudaStream_t);                  \
  template cudaError_t add_float<S>(S*, const float*, int64_t, cudaStream_t);                  \
  template cudaError_t add_into<S>(void*, HostType, const S*, int64_t, cudaStream_t);

DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(__nv_bfloat16)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::gpu
