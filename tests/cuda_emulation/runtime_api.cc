// The CUDA runtime API for the emulation (include/cuda_emulation.h),
// defined here in place of cudart's, as far as dscore's CUDA code calls it.
// Devices of compute capability 9.0 with memory pools (one unless
// DSCORE_CUDA_EMULATION_DEVICES says more); device memory is host memory, so every copy kind is
// memcpy. Streams and events are in streams.cc. An asynchronous copy or memset runs on its stream,
// except that a copy from or to pageable memory (any not allocated here)
// waits for the stream and copies before it returns, as cudart stages it.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "cuda_emulation.h"

namespace {

// Each device's memory: DSCORE_CUDA_EMULATION_MEMORY bytes, 80 GiB when
// unset (read at each call, so a test may set it). Device allocations past
// it fail with cudaErrorMemoryAllocation, as on a full GPU; pinned host
// memory does not count.
size_t memory_bytes() {
  const char* v = std::getenv("DSCORE_CUDA_EMULATION_MEMORY");
  const unsigned long long bytes = v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
  return bytes > 0 ? static_cast<size_t>(bytes) : size_t{80} << 30;
}

// The devices: DSCORE_CUDA_EMULATION_DEVICES of them (1 to 8; default 1),
// all on the same memory; the current one is per thread, as cudart's.
int device_count() {
  static const int count = [] {
    const char* v = std::getenv("DSCORE_CUDA_EMULATION_DEVICES");
    const int n = v != nullptr ? std::atoi(v) : 1;
    return n >= 1 && n <= 8 ? n : 1;
  }();
  return count;
}
bool valid_device(int device) { return device >= 0 && device < device_count(); }
thread_local int t_device = 0;

}  // namespace

int dscore::cuda_emulation::current_device() { return t_device; }

namespace {

// Device and pinned allocations by address: what is not in here is pageable.
struct Allocation {
  size_t bytes = 0;      // taken (rounded up, plus 256)
  size_t requested = 0;  // asked for
  int device = 0;
  bool on_device = false;  // counted in the device's memory (not pinned host memory)
};
std::mutex g_allocations_mutex;
std::map<uintptr_t, Allocation> g_allocations;
size_t g_device_used[8] = {};  // by device, under the mutex
// In stream order, as a stream-ordered pool holds memory: an allocation
// counts from its call (cudaMalloc) or its stream's point (cudaMallocAsync)
// until its free's (cudaFree, or cudaFreeAsync's stream point), by the
// bytes asked for. The host runs ahead of the streams, so g_device_used
// counts a layer's buffers and the next's at once where a pool reuses the
// first for the second.
int64_t g_ordered_used[8] = {};
int64_t g_ordered_peak[8] = {};  // the most g_ordered_used has been since the last reset

// Under the mutex.
void count_ordered(int device, int64_t bytes) {
  g_ordered_used[device] += bytes;
  g_ordered_peak[device] = std::max(g_ordered_peak[device], g_ordered_used[device]);
}

// nullptr when the host is out of memory, or device memory past the
// device's (memory_bytes()). `ordered`: counted in stream order now (else
// by count_ordered_allocation at its stream's point).
void* device_allocate(size_t size, bool on_device, bool ordered = true) {
  const size_t bytes = (size + 255) / 256 * 256 + 256;
  const int device = dscore::cuda_emulation::current_device();
  if (on_device) {
    std::lock_guard<std::mutex> lock(g_allocations_mutex);
    if (g_device_used[device] + bytes > memory_bytes()) return nullptr;
    g_device_used[device] += bytes;
  }
  void* ptr = std::aligned_alloc(256, bytes);
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  if (ptr == nullptr) {
    if (on_device) g_device_used[device] -= bytes;
    return nullptr;
  }
  g_allocations[reinterpret_cast<uintptr_t>(ptr)] = {bytes, size, device, on_device};
  if (on_device && ordered) count_ordered(device, static_cast<int64_t>(size));
  return ptr;
}

void device_free(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_allocations_mutex);
    auto it = g_allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != g_allocations.end()) {
      if (it->second.on_device) {
        g_device_used[it->second.device] -= it->second.bytes;
        count_ordered(it->second.device, -static_cast<int64_t>(it->second.requested));
      }
      g_allocations.erase(it);
    }
  }
  std::free(ptr);
}

size_t device_used(int device) {
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  return g_device_used[device];
}

// cudaMallocAsync's allocation at `ptr` reached by its stream.
void count_ordered_allocation(void* ptr) {
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  auto it = g_allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it != g_allocations.end() && it->second.on_device)
    count_ordered(it->second.device, static_cast<int64_t>(it->second.requested));
}

}  // namespace

size_t dscore::cuda_emulation::device_bytes_in_use(int device) {
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  return static_cast<size_t>(std::max<int64_t>(g_ordered_used[device], 0));
}

size_t dscore::cuda_emulation::device_peak_bytes(int device) {
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  return static_cast<size_t>(std::max<int64_t>(g_ordered_peak[device], 0));
}

void dscore::cuda_emulation::reset_device_peak(int device) {
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  g_ordered_peak[device] = g_ordered_used[device];
}

namespace {

bool pageable(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_allocations_mutex);
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return true;
  --it;
  return p >= it->first + it->second.bytes;
}

// Runs `copy` on `stream`, or, with pageable memory on either side, after
// the stream's work and before returning.
void copy_on(cudaStream_t stream, const void* src, const void* dst, std::function<void()> copy) {
  if (!pageable(src) && !pageable(dst))
    return dscore::cuda_emulation::enqueue(stream, std::move(copy));
  dscore::cuda_emulation::synchronize(stream);
  copy();
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGetLastError(void) { return dscore::cuda_emulation::take_last_error(); }

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "an error of the CUDA emulation";
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  return error == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulation";
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  t_device = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "CUDA emulation (CPU)", sizeof(prop->name) - 1);
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = memory_bytes();
  prop->multiProcessorCount = 1;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlockOptin = dscore::cuda_emulation::kMaxSharedBytes;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = memory_bytes();
  const size_t used = device_used(dscore::cuda_emulation::current_device());
  *free_bytes = used < *total_bytes ? *total_bytes - used : 0;
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
  *ptr = device_allocate(size, /*on_device=*/true);
  return *ptr == nullptr ? dscore::cuda_emulation::failed_call(cudaErrorMemoryAllocation)
                         : cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) {
  *ptr = device_allocate(size, /*on_device=*/false);
  return *ptr == nullptr ? dscore::cuda_emulation::failed_call(cudaErrorMemoryAllocation)
                         : cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  return cudaMallocHost(ptr, size);
}

// A stream-ordered allocation is valid from its stream's point on: the
// emulation fills it with 0xFF bytes (NaN in every float type) when the
// stream gets there, so work that uses it out of that order (on another
// stream without an event) reads NaN or has its writes overwritten, as a
// real pool could hand it a block the stream's earlier work still uses.
cudaError_t CUDARTAPI cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  void* p = device_allocate(size, /*on_device=*/true, /*ordered=*/false);
  *ptr = p;
  if (p == nullptr) return dscore::cuda_emulation::failed_call(cudaErrorMemoryAllocation);
  dscore::cuda_emulation::enqueue(stream, [p, size] {
    count_ordered_allocation(p);
    std::memset(p, 0xFF, size);
  });
  return cudaSuccess;
}

// As cudart's, after the device's work (which may still use it).
cudaError_t CUDARTAPI cudaFree(void* ptr) {
  dscore::cuda_emulation::synchronize_device();
  device_free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) { return cudaFree(ptr); }

cudaError_t CUDARTAPI cudaFreeAsync(void* ptr, cudaStream_t stream) {
  dscore::cuda_emulation::enqueue(stream, [ptr] { device_free(ptr); });
  return cudaSuccess;
}

// Memory pools are tokens: an allocation from one is cudaMallocAsync's
// (poisoned in its stream's order), and its stream-ordered free
// (cudaFreeAsync) runs on the stream.
cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* pool, const struct cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr || !valid_device(props->location.id))
    return cudaErrorInvalidValue;
  *pool = reinterpret_cast<cudaMemPool_t>(new int(props->location.id));
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t pool) {
  delete reinterpret_cast<int*>(pool);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr, void*) {
  return pool == nullptr ? cudaErrorInvalidValue : cudaSuccess;
}
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                              cudaStream_t stream) {
  if (pool == nullptr) return cudaErrorInvalidValue;
  return cudaMallocAsync(ptr, size, stream);
}

// The synchronous calls run on the legacy default stream.
cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count,
                                 enum cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, nullptr);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return dscore::cuda_emulation::failed_call(cudaErrorInvalidMemcpyDirection);
  if (count > 0) copy_on(stream, src, dst, [=] { std::memmove(dst, src, count); });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind,
                                        cudaStream_t stream) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  copy_on(stream, src, dst, [=] {
    for (size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                   width);
  });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t count) {
  return cudaMemsetAsync(ptr, value, count, nullptr);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  dscore::cuda_emulation::enqueue(stream, [=] { std::memset(ptr, value, count); });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaProfilerStart(void) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaProfilerStop(void) { return cudaSuccess; }

}  // extern "C"
