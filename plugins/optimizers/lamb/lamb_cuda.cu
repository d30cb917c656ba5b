// The multi-tensor CUDA LAMB (lamb_cuda.h). Like the adam plugin's kernel,
// tensor pointers and a block -> (tensor, chunk) table travel in the kernel
// parameters (< 4 KiB). One block of kNormLanes threads per chunk of
// kNormChunk elements, thread t owning the groups of 4 elements that
// lamb_update.h gives lane t, so the norms are summed in exactly the CPU's
// order; the arithmetic is spelled out with __f*_rn / __d*_rn intrinsics in
// lamb_update.h's order (and the file is built with --fmad=false).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lamb_cuda.h"

namespace dscore::lamb {
namespace {

constexpr int kThreads = kNormLanes;
constexpr int kMaxTensorsPerLaunch = 32;
constexpr int kMaxBlocksPerLaunch = 320;
constexpr int kMaxRatiosPerLaunch = 128;

struct ChunkList {
  float* param[kMaxTensorsPerLaunch];
  const void* grad[kMaxTensorsPerLaunch];
  float* exp_avg[kMaxTensorsPerLaunch];
  float* exp_avg_sq[kMaxTensorsPerLaunch];
  void* param_16bit[kMaxTensorsPerLaunch];
  int64_t numel[kMaxTensorsPerLaunch];
  int32_t tensor[kMaxTensorsPerLaunch];            // index in the step (scaled steps)
  int32_t first_chunk[kMaxTensorsPerLaunch];       // the tensor's chunk 0 in the partial sums
  unsigned char vectorised[kMaxTensorsPerLaunch];  // every buffer aligned for vector loads
  unsigned char block_tensor[kMaxBlocksPerLaunch];
  int32_t block_chunk[kMaxBlocksPerLaunch];
};
static_assert(sizeof(ChunkList) + sizeof(LambConstants) <= 4096, "kernel parameters > 4 KiB");

struct RatioList {
  int32_t tensor[kMaxRatiosPerLaunch];
  int32_t first_chunk[kMaxRatiosPerLaunch];
  int32_t chunks[kMaxRatiosPerLaunch];
  int32_t count;
};

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw sdk::Error(DSCORE_INTERNAL, std::string("lamb: ") + what + " failed: " +
                                          cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

template <dscore_dtype G>
__device__ __forceinline__ float load_grad(const void* grad, int64_t i) {
  if constexpr (G == DSCORE_DTYPE_F32)
    return static_cast<const float*>(grad)[i];
  else if constexpr (G == DSCORE_DTYPE_BF16)
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(grad)[i]) << 16);
  else
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(grad)[i]));
}

template <dscore_dtype P16>
__device__ __forceinline__ void store_copy(void* out, int64_t i, float p) {
  if constexpr (P16 == DSCORE_DTYPE_F32)
    static_cast<float*>(out)[i] = p;
  else if constexpr (P16 == DSCORE_DTYPE_BF16)
    static_cast<uint16_t*>(out)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  else if constexpr (P16 == DSCORE_DTYPE_F16)
    static_cast<uint16_t*>(out)[i] = __half_as_ushort(__float2half_rn(p));
}

// lamb_update.h's lamb_update and lamb_moments, rounding for rounding.
__device__ __forceinline__ float update(const LambConstants& k, float p, float m, float v) {
  const float denom =
      k.eps_inside_sqrt ? __fsqrt_rn(__fadd_rn(v, k.eps)) : __fadd_rn(__fsqrt_rn(v), k.eps);
  return __fadd_rn(__fdiv_rn(m, denom), __fmul_rn(k.weight_decay, p));
}

__device__ __forceinline__ void moments(const LambConstants& k, float g_raw, float& m, float& v) {
  const float g = __fmul_rn(g_raw, k.grad_scale);
  m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(__fsub_rn(1.0f, k.beta1), g));
  v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, k.beta2), g), g));
}

// Pass 1: moments of one chunk, its |p|^2 and |u|^2 into partial[].
template <dscore_dtype G>
__global__ void __launch_bounds__(kThreads)
    moments_kernel(ChunkList list, LambConstants k, double2* partial) {
  const int t = list.block_tensor[blockIdx.x];
  const int64_t chunk = list.block_chunk[blockIdx.x];
  const int64_t offset = chunk * kNormChunk;
  const int64_t n = list.numel[t] - offset < kNormChunk ? list.numel[t] - offset : kNormChunk;
  float* param = list.param[t] + offset;
  float* exp_avg = list.exp_avg[t] + offset;
  float* exp_avg_sq = list.exp_avg_sq[t] + offset;
  const void* grad =
      static_cast<const char*>(list.grad[t]) + offset * (G == DSCORE_DTYPE_F32 ? 4 : 2);
  double w = 0.0, u = 0.0;
  auto element = [&](int64_t i, float g, float p, float& m, float& v) {
    moments(k, g, m, v);
    const double pd = p;
    const double ud = update(k, p, m, v);
    w = __dadd_rn(w, __dmul_rn(pd, pd));
    u = __dadd_rn(u, __dmul_rn(ud, ud));
    (void)i;
  };
  // Thread t: groups t, t + kThreads, ... of kNormGroup elements, in order.
  for (int64_t i = kNormGroup * static_cast<int64_t>(threadIdx.x); i < n;
       i += kNormGroup * static_cast<int64_t>(kThreads)) {
    if (list.vectorised[t] && i + 4 <= n) {
      const float4 p4 = *reinterpret_cast<const float4*>(param + i);
      float4 m4 = *reinterpret_cast<const float4*>(exp_avg + i);
      float4 v4 = *reinterpret_cast<const float4*>(exp_avg_sq + i);
      float g[4];
      for (int q = 0; q < 4; ++q) g[q] = load_grad<G>(grad, i + q);
      element(i, g[0], p4.x, m4.x, v4.x);
      element(i + 1, g[1], p4.y, m4.y, v4.y);
      element(i + 2, g[2], p4.z, m4.z, v4.z);
      element(i + 3, g[3], p4.w, m4.w, v4.w);
      *reinterpret_cast<float4*>(exp_avg + i) = m4;
      *reinterpret_cast<float4*>(exp_avg_sq + i) = v4;
    } else {
      for (int64_t e = i; e < i + kNormGroup && e < n; ++e) {
        float m = exp_avg[e], v = exp_avg_sq[e];
        element(e, load_grad<G>(grad, e), param[e], m, v);
        exp_avg[e] = m;
        exp_avg_sq[e] = v;
      }
    }
  }
  // lamb_update.h's halving tree.
  __shared__ double ws[kThreads];
  __shared__ double us[kThreads];
  ws[threadIdx.x] = w;
  us[threadIdx.x] = u;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) {
      ws[threadIdx.x] = __dadd_rn(ws[threadIdx.x], ws[threadIdx.x + s]);
      us[threadIdx.x] = __dadd_rn(us[threadIdx.x], us[threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[list.first_chunk[t] + chunk] = make_double2(ws[0], us[0]);
}

// Per tensor: chunk sums in chunk order, then lamb_scaled_step.
__global__ void ratio_kernel(RatioList list, LambConstants k, const double2* partial,
                             float* scaled_step) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= list.count) return;
  double w = 0.0, u = 0.0;
  for (int c = 0; c < list.chunks[i]; ++c) {
    const double2 s = partial[list.first_chunk[i] + c];
    w = __dadd_rn(w, s.x);
    u = __dadd_rn(u, s.y);
  }
  double ratio = 1.0;
  if (w != 0 && u != 0) ratio = __ddiv_rn(__dsqrt_rn(w), __dsqrt_rn(u));
  ratio = ratio < k.min_coeff ? k.min_coeff : (k.max_coeff < ratio ? k.max_coeff : ratio);  // clamp
  scaled_step[list.tensor[i]] =
      __double2float_rn(__dmul_rn(static_cast<double>(k.step_size), ratio));
}

// Pass 2: p -= scaled_step * u, from the stored moments; the 16-bit copy.
template <dscore_dtype P16>
__global__ void __launch_bounds__(kThreads)
    apply_kernel(ChunkList list, LambConstants k, const float* scaled_step) {
  const int t = list.block_tensor[blockIdx.x];
  const int64_t offset = static_cast<int64_t>(list.block_chunk[blockIdx.x]) * kNormChunk;
  const int64_t n = list.numel[t] - offset < kNormChunk ? list.numel[t] - offset : kNormChunk;
  float* param = list.param[t] + offset;
  const float* exp_avg = list.exp_avg[t] + offset;
  const float* exp_avg_sq = list.exp_avg_sq[t] + offset;
  void* out = list.param_16bit[t] == nullptr ? nullptr
                                             : static_cast<char*>(list.param_16bit[t]) +
                                                   offset * (P16 == DSCORE_DTYPE_F32 ? 4 : 2);
  const float s = scaled_step[list.tensor[t]];
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float p =
        __fsub_rn(param[i], __fmul_rn(s, update(k, param[i], exp_avg[i], exp_avg_sq[i])));
    param[i] = p;
    store_copy<P16>(out, i, p);
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int64_t chunks_of(int64_t numel) { return (numel + kNormChunk - 1) / kNormChunk; }

// Calls launch(list, blocks, dtype) for batches of (tensor, chunk) blocks
// whose tensors share key(tensor) (the dtype the kernel is built for).
template <typename Key, typename Launch>
void for_each_launch(const LambTensor* tensors, size_t count, const std::vector<int32_t>& first,
                     Key key, Launch launch) {
  ChunkList list{};
  int in_list = 0, blocks = 0;
  dscore_dtype dtype = DSCORE_DTYPE_INVALID;
  auto flush = [&] {
    if (blocks > 0) launch(list, blocks, dtype);
    in_list = 0;
    blocks = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    const LambTensor& t = tensors[i];
    if (t.numel == 0) continue;
    if (in_list > 0 && key(t) != dtype) flush();
    if (in_list == kMaxTensorsPerLaunch) flush();
    dtype = key(t);
    const int64_t chunks = chunks_of(t.numel);
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || in_list == 0) {  // (re)enter the tensor into the current list
        const int slot = in_list++;
        list.param[slot] = t.param;
        list.grad[slot] = t.grad;
        list.exp_avg[slot] = t.exp_avg;
        list.exp_avg_sq[slot] = t.exp_avg_sq;
        list.param_16bit[slot] = t.param_16bit;
        list.numel[slot] = t.numel;
        list.tensor[slot] = static_cast<int32_t>(i);
        list.first_chunk[slot] = first[i];
        // 16-bit gradients are read one element at a time, so only the
        // fp32 buffers need 16-byte alignment.
        list.vectorised[slot] =
            aligned16(t.param) && aligned16(t.exp_avg) && aligned16(t.exp_avg_sq);
      }
      list.block_tensor[blocks] = static_cast<unsigned char>(in_list - 1);
      list.block_chunk[blocks] = static_cast<int32_t>(c);
      if (++blocks == kMaxBlocksPerLaunch) flush();
    }
  }
  flush();
}

void launched(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace

void lamb_step_cuda(const LambConstants& k, const LambTensor* tensors, size_t count, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  std::vector<int32_t> first(count, 0);
  int64_t total_chunks = 0;
  for (size_t i = 0; i < count; ++i) {
    first[i] = static_cast<int32_t>(total_chunks);
    total_chunks += chunks_of(tensors[i].numel);
  }
  if (total_chunks == 0) return;
  void* scratch = nullptr;
  const size_t partial_bytes = static_cast<size_t>(total_chunks) * sizeof(double2);
  check(cudaMallocAsync(&scratch, partial_bytes + count * sizeof(float), s),
        "cudaMallocAsync of the norm scratch");
  auto* partial = static_cast<double2*>(scratch);
  auto* scaled_step = reinterpret_cast<float*>(static_cast<char*>(scratch) + partial_bytes);

  for_each_launch(
      tensors, count, first, [](const LambTensor& t) { return t.grad_dtype; },
      [&](const ChunkList& list, int blocks, dscore_dtype g) {
        sdk::with_float_dtype(g, [&](auto tag) {
          moments_kernel<decltype(tag)::value><<<blocks, kThreads, 0, s>>>(list, k, partial);
        });
        launched("moments_kernel");
      });
  RatioList ratios{};
  auto flush_ratios = [&] {
    if (ratios.count == 0) return;
    ratio_kernel<<<(ratios.count + 127) / 128, 128, 0, s>>>(ratios, k, partial, scaled_step);
    launched("ratio_kernel");
    ratios.count = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    if (tensors[i].numel == 0) continue;
    ratios.tensor[ratios.count] = static_cast<int32_t>(i);
    ratios.first_chunk[ratios.count] = first[i];
    ratios.chunks[ratios.count] = static_cast<int32_t>(chunks_of(tensors[i].numel));
    if (++ratios.count == kMaxRatiosPerLaunch) flush_ratios();
  }
  flush_ratios();
  for_each_launch(
      tensors, count, first, [](const LambTensor& t) { return t.out16_dtype; },
      [&](const ChunkList& list, int blocks, dscore_dtype o) {
        sdk::with_output_dtype(o, [&](auto tag) {
          apply_kernel<decltype(tag)::value><<<blocks, kThreads, 0, s>>>(list, k, scaled_step);
        });
        launched("apply_kernel");
      });
  check(cudaFreeAsync(scratch, s), "cudaFreeAsync of the norm scratch");
}

}  // namespace dscore::lamb
