// The CUDA runtime API for the emulation (include/cuda_emulation.h),
// defined here in place of cudart's, as far as dscore's CUDA code calls it.
// One device (ordinal 0, compute capability 9.0, no memory pools); device
// memory is host memory, so every copy kind is memcpy. Streams and events
// are tokens: a launch or copy runs when it is enqueued, so each is
// complete when it returns (stream order holds trivially; the CPU device's
// asynchronous streams test ordering rules instead, core/device).
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "cuda_emulation.h"

namespace {

constexpr size_t kMemoryBytes = size_t{80} << 30;  // what cudaMemGetInfo reports

void* device_allocate(size_t size) {
  return std::aligned_alloc(256, (size + 255) / 256 * 256 + 256);
}

int g_stream_tokens = 0;

}  // namespace

// An event records nothing: the work before it is done when it is recorded.
struct CUevent_st {
  bool recorded = false;
};

extern "C" {

cudaError_t CUDARTAPI cudaGetLastError(void) { return dscore::cuda_emulation::take_last_error(); }

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "an error of the CUDA emulation";
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  return error == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulation";
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
    case cudaDevAttrMemoryPoolsSupported:
      *value = 0;
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "CUDA emulation (CPU)", sizeof(prop->name) - 1);
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = kMemoryBytes;
  prop->multiProcessorCount = 1;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlockOptin = dscore::cuda_emulation::kMaxSharedBytes;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = kMemoryBytes;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* /*func*/, enum cudaFuncAttribute attr,
                                           int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) > dscore::cuda_emulation::kMaxSharedBytes)
    return cudaErrorInvalidValue;
  dscore::cuda_emulation::raise_shared_limit(value);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes* attributes, const void*) {
  *attributes = cudaFuncAttributes{};
  attributes->maxThreadsPerBlock = 1024;
  attributes->ptxVersion = attributes->binaryVersion = 90;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t size) {
  *ptr = device_allocate(size);
  return *ptr == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) { return cudaMalloc(ptr, size); }

cudaError_t CUDARTAPI cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  return cudaMalloc(ptr, size);
}

cudaError_t CUDARTAPI cudaMallocAsync(void** ptr, size_t size, cudaStream_t) {
  return cudaMalloc(ptr, size);
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) { return cudaFree(ptr); }

cudaError_t CUDARTAPI cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }

// No memory pools (cudaDevAttrMemoryPoolsSupported is 0).
cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t*, const struct cudaMemPoolProps*) {
  return cudaErrorNotSupported;
}
cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t) { return cudaErrorNotSupported; }
cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void*) {
  return cudaErrorNotSupported;
}
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void**, size_t, cudaMemPool_t, cudaStream_t) {
  return cudaErrorNotSupported;
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count,
                                 enum cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return dscore::cuda_emulation::failed_call(cudaErrorInvalidMemcpyDirection);
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind,
                                        cudaStream_t) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                 width);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t count) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  return cudaMemset(ptr, value, count);
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(&g_stream_tokens);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned int) {
  return event == nullptr ? cudaErrorInvalidResourceHandle : cudaSuccess;
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  fn(data);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, 0);
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  return event == nullptr ? cudaErrorInvalidResourceHandle : cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  *ms = 0.0f;  // no device time passes
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaProfilerStart(void) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaProfilerStop(void) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaSuccess; }

}  // extern "C"
