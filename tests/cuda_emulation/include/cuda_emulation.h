// A CPU emulation of the CUDA execution model, enough to run the source of
// dscore's CUDA kernels in tests on machines without a GPU. A .cu file is
// compiled as C++ after host_source.cmake rewrites its launches (below,
// PendingLaunch) and its __shared__ declarations (dynamic shared memory
// becomes dynamic_shared_memory(), static variables thread_local function
// statics). This header is included first and declares what device code
// uses that the CUDA headers give only under nvcc.
//
// A launch runs its blocks one after another on its stream's thread
// (streams.cc: a created stream's worker, the legacy stream's caller); the
// threads of a block are fibers. A fiber runs until it reaches a barrier
// (__syncthreads, __syncwarp, a shuffle), and a barrier opens once every
// thread it names has reached it. Threads run in ascending order, or
// descending with set_schedule(Schedule::kDescending): a barrier missing
// between a write and another thread's read shows as a wrong result in one
// of the two orders. A barrier that not all of its threads reach (one
// exited, or waits at another) ends the run with an error naming it.
// Dynamic shared memory starts every block filled with 0xff bytes (NaN as
// float and bf16), so reads of what no thread wrote show too; static
// __shared__ variables keep the last block's values. WMMA fragments (mma.h
// beside this header) hold the whole tile in every lane; a store writes
// each element from one lane.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// Occupancy hints mean nothing here (cuda_runtime.h defines them only under nvcc).
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// The built-in variables of the calling emulated thread (per OS thread:
// host threads may launch kernels at once, each runs its own).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);

namespace dscore::cuda_emulation {

enum class Schedule { kAscending, kDescending };
void set_schedule(Schedule schedule);

// The calling thread's lane in its warp.
int lane();
// The block's dynamic shared memory.
unsigned char* dynamic_shared_memory();
// Exchanges 8 bytes with lane `source` of the same warp (a warp barrier
// before and after).
uint64_t exchange(uint64_t value, int source);
// The lanes of a warp run the same tile products one lane after another:
// recall_product finds the product the warp computed at this point since
// its last barrier from the same `tiles` (false: compute it and call
// remember_product).
bool recall_product(const void* tiles, size_t tile_bytes, void* product, size_t product_bytes);
void remember_product(const void* tiles, size_t tile_bytes, const void* product,
                      size_t product_bytes);
// For runtime_api.cc: the last launch error (cleared), and a dynamic
// shared memory limit some kernel was given (at most kMaxSharedBytes).
constexpr size_t kMaxSharedBytes = 232448;  // Hopper's, per block
cudaError_t take_last_error();
// A failed runtime call: records `error` as the thread's last error (as
// cudart does) and returns it.
cudaError_t failed_call(cudaError_t error);
void raise_shared_limit(int bytes);
// Ends the run with `message` (a device-side error the emulation found).
[[noreturn]] void fail(const char* message);

// Stream order (streams.cc): `task` runs on `stream`'s worker after the
// work enqueued there before it; on the legacy default stream it runs on
// the caller once every blocking stream of the current device is idle.
void enqueue(cudaStream_t stream, std::function<void()> task);
int current_device();  // the calling thread's (cudaSetDevice)
void synchronize(cudaStream_t stream);
void synchronize_device();

// What the process has asked of the emulated devices so far: the calls
// that wait for a whole device (cudaDeviceSynchronize, cudaFree,
// cudaFreeHost), the work put on the legacy default stream (each waits
// for the device's blocking streams), and the host's waits for a stream
// or an event. A GPU step should need none of the first two.
struct Counters {
  uint64_t device_synchronizations = 0;
  uint64_t legacy_stream_operations = 0;
  uint64_t stream_synchronizations = 0;
  uint64_t event_synchronizations = 0;
};
Counters counters();

// Device memory of `device` in use in stream order, as a stream-ordered
// pool holds it (an allocation counts from its call, or cudaMallocAsync's
// stream point, until its free's; by the bytes asked for),
// and the most in use at once since reset_device_peak (or the start): what
// a test holds a declared memory figure against.
size_t device_bytes_in_use(int device);
size_t device_peak_bytes(int device);
void reset_device_peak(int device);

struct LaunchConfig {
  LaunchConfig(dim3 grid_, dim3 block_, size_t shared_bytes_ = 0, cudaStream_t stream_ = nullptr)
      : grid(grid_), block(block_), shared_bytes(shared_bytes_), stream(stream_) {}
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
};

// Enqueues `body` on the config's stream to run as every thread of every
// block; records a launch error (cudaGetLastError) instead when the
// configuration is invalid: threads per block, or dynamic shared memory
// above 48 KiB that no cudaFuncSetAttribute allowed (any kernel's: which
// kernel a launch runs is not known here).
void launch_grid(const LaunchConfig& config, std::function<void()> body);

// `kernel<<<config>>>(args)` becomes
// `LaunchConfig(config) | [=](auto&&... a) { kernel(a...); } | arguments(args)`:
// the kernel's template arguments are deduced from the call, as nvcc does.
template <typename Body>
struct PendingLaunch {
  LaunchConfig config;
  Body body;
};

template <typename Body>
PendingLaunch<Body> operator|(const LaunchConfig& config, Body body) {
  return {config, std::move(body)};
}

template <typename... Args>
std::tuple<std::decay_t<Args>...> arguments(Args&&... args) {
  return std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...);
}

template <typename Body, typename... Args>
void operator|(const PendingLaunch<Body>& launch, const std::tuple<Args...>& args) {
  launch_grid(launch.config, [body = launch.body, args] { std::apply(body, args); });
}

}  // namespace dscore::cuda_emulation

// nvcc's overloads for kernels (cuda_runtime.h declares them only under nvcc).
template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
template <typename T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, T* kernel) {
  return cudaFuncGetAttributes(attributes, reinterpret_cast<const void*>(kernel));
}

// Device code calls the classification functions unqualified.
using std::isfinite;
using std::isinf;
using std::isnan;

// Device intrinsics that have no host version in the CUDA headers. The
// rounded arithmetic is the plain IEEE operation: the emulation compiles
// without multiply-add contraction (-std=c++20, -ffp-contract=off).
inline float __uint_as_float(unsigned int bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return static_cast<float>(a); }

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle of more than 8 bytes");
  if (mask != 0xffffffffu || width != 32)
    dscore::cuda_emulation::fail("__shfl_xor_sync: only full-warp shuffles are emulated");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = dscore::cuda_emulation::exchange(bits, dscore::cuda_emulation::lane() ^ lane_mask);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}
