// CudaContext (cuda_context.h): device, stream, cuBLAS handle, memory pool,
// scratch and pinned staging of one GPT model on CUDA, and the error
// helpers that turn CUDA/cuBLAS failures into sdk::Error.
#include "cuda_context.h"

#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda_kernels.h"

#ifndef DSCORE_GPT_CUDA_ARCHITECTURES
#define DSCORE_GPT_CUDA_ARCHITECTURES "unknown"
#endif

namespace dscore::gpt::gpu {
namespace {

constexpr size_t kCublasWorkspace = transformer::cuda_memory::kCublasWorkspaceBytes;
constexpr size_t kMinUpload = size_t{64} << 10;  // an upload slot's first size

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

std::string mib(size_t bytes) {
  return std::to_string((bytes + (size_t{1} << 20) - 1) >> 20) + " MiB";
}

}  // namespace

void require_cuda_device(const char* model) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return;
  cudaGetLastError();
  throw sdk::Error(
      DSCORE_UNAVAILABLE,
      std::string(model) + ": \"device\": \"cuda\" but no CUDA device is visible: " +
          (err != cudaSuccess ? std::string(cudaGetErrorString(err)) + " (cudaGetDeviceCount)"
                              : std::string("cudaGetDeviceCount found 0 devices")) +
          "; check the driver and CUDA_VISIBLE_DEVICES, or set \"device\": \"cpu\"");
}

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  const dscore_status code = err == cudaErrorMemoryAllocation ? DSCORE_RESOURCE_EXHAUSTED
                             : err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
                                     err == cudaErrorDevicesUnavailable
                                 ? DSCORE_UNAVAILABLE
                                 : DSCORE_INTERNAL;
  cudaGetLastError();  // clear a non-sticky error so later calls report their own
  throw sdk::Error(code, std::string("gpt (cuda): ") + call +
                             " failed: " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) +
                             ") at " + base_name(file) + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw sdk::Error(
      status == CUBLAS_STATUS_ALLOC_FAILED ? DSCORE_RESOURCE_EXHAUSTED : DSCORE_INTERNAL,
      std::string("gpt (cuda): ") + call + " failed: " + cublasGetStatusString(status) + " at " +
          base_name(file) + ":" + std::to_string(line));
}

CudaContext::CudaContext() {
  try {
    DSCORE_GPT_CUDA_CHECK(cudaGetDevice(&device_));
    int major = 0, minor = 0;
    DSCORE_GPT_CUDA_CHECK(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    DSCORE_GPT_CUDA_CHECK(
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
    const cudaError_t probe = probe_kernels();
    if (probe != cudaSuccess) {
      cudaGetLastError();
      throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                       "gpt (cuda): the CUDA kernels were built for "
                       "CUDA_ARCHITECTURES " DSCORE_GPT_CUDA_ARCHITECTURES " and device " +
                           std::to_string(device_) + " is sm_" + std::to_string(major) +
                           std::to_string(minor) + " (" + cudaGetErrorString(probe) +
                           "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(major) +
                           std::to_string(minor));
    }
    if (major < 8)
      throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                       "gpt (cuda): device " + std::to_string(device_) + " is sm_" +
                           std::to_string(major) + std::to_string(minor) +
                           "; the gpt CUDA kernels need sm_80 or newer (bf16)");
    DSCORE_GPT_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
    stream_ = own_stream_;
    DSCORE_GPT_CUDA_CHECK(cudaEventCreateWithFlags(&handoff_, cudaEventDisableTiming));
    DSCORE_GPT_CUBLAS_CHECK(cublasCreate(&blas_));
    DSCORE_GPT_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    int pools = 0;
    DSCORE_GPT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
    if (pools != 0) {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.handleTypes = cudaMemHandleTypeNone;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device_;
      DSCORE_GPT_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
      uint64_t keep =
          UINT64_MAX;  // keep freed memory for reuse instead of returning it at each sync
      DSCORE_GPT_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    }
  } catch (...) {
    destroy();
    throw;
  }
}

CudaContext::~CudaContext() { destroy(); }

void CudaContext::destroy() noexcept {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (Block& b : scratch_) {
    release(b.data);
    b = Block{};
  }
  for (Block& b : pinned_) {
    if (b.data != nullptr) cudaFreeHost(b.data);
    b = Block{};
  }
  for (UploadSlot& slot : uploads_) {
    if (slot.copied != nullptr) cudaEventSynchronize(slot.copied);  // on whichever stream it ran
    if (slot.block.data != nullptr) cudaFreeHost(slot.block.data);
    if (slot.copied != nullptr) cudaEventDestroy(slot.copied);
    slot = UploadSlot{};
  }
  if (blas_ != nullptr) cublasDestroy(blas_);
  blas_ = nullptr;
  release(workspace_);  // after the work queued on it
  workspace_ = nullptr;
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
  pool_ = nullptr;
  if (handoff_ != nullptr) cudaEventDestroy(handoff_);
  handoff_ = nullptr;
  if (own_stream_ != nullptr) cudaStreamDestroy(own_stream_);  // the host's stays the host's
  own_stream_ = stream_ = nullptr;
  cudaGetLastError();
}

void CudaContext::make_current() const { DSCORE_GPT_CUDA_CHECK(cudaSetDevice(device_)); }

void CudaContext::synchronize() const { DSCORE_GPT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaContext::use_stream(cudaStream_t stream) {
  if (stream == nullptr) stream = own_stream_;
  if (stream == stream_) return;
  // The new stream's work starts after what the previous one holds (no
  // host wait).
  DSCORE_GPT_CUDA_CHECK(cudaEventRecord(handoff_, stream_));
  DSCORE_GPT_CUDA_CHECK(cudaStreamWaitEvent(stream, handoff_, 0));
  stream_ = stream;
  DSCORE_GPT_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // (cublasSetStream resets the workspace.)
  if (workspace_ != nullptr)
    DSCORE_GPT_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, kCublasWorkspace));
}

cublasHandle_t CudaContext::blas() {
  if (workspace_ == nullptr) {
    workspace_ = allocate(kCublasWorkspace, "the cuBLAS workspace");
    DSCORE_GPT_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, kCublasWorkspace));
  }
  return blas_;
}

void* CudaContext::allocate(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err =
      pool_ != nullptr ? cudaMallocFromPoolAsync(&p, bytes, pool_, stream_) : cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw sdk::Error(DSCORE_RESOURCE_EXHAUSTED,
                     "gpt (cuda): out of GPU memory allocating " + mib(bytes) + " of " + what +
                         " on device " + std::to_string(device_) + " (" + mib(free_bytes) +
                         " free of " + mib(total_bytes) +
                         "); lower train_micro_batch_size_per_gpu or block_size, enable "
                         "activation_checkpointing, "
                         "or use \"cuda_dtype\": \"bf16\"");
  }
  if (err != cudaSuccess)
    throw_cuda_error(err, pool_ != nullptr ? "cudaMallocFromPoolAsync" : "cudaMalloc", __FILE__,
                     __LINE__);
  return p;
}

void CudaContext::release(void* p) noexcept {
  if (p == nullptr) return;
  if (pool_ != nullptr) {
    cudaFreeAsync(p, stream_);
  } else {
    cudaStreamSynchronize(stream_);  // cudaFree does not wait for our non-blocking stream
    cudaFree(p);
  }
}

void* CudaContext::scratch(Scratch slot, size_t bytes) {
  Block& b = scratch_[static_cast<int>(slot)];
  if (bytes > b.bytes) {
    release(b.data);
    b = Block{};
    b.data = allocate(bytes, "scratch");
    b.bytes = bytes;
  }
  return b.data;
}

void CudaContext::grow_pinned(Block& block, size_t bytes, const char* what) {
  if (bytes <= block.bytes) return;
  if (block.data != nullptr) cudaFreeHost(block.data);
  block = Block{};
  const cudaError_t err = cudaMallocHost(&block.data, bytes);
  if (err != cudaSuccess) {
    block.data = nullptr;
    cudaGetLastError();
    throw sdk::Error(DSCORE_RESOURCE_EXHAUSTED, std::string("gpt (cuda): cudaMallocHost of ") +
                                                    mib(bytes) + " of pinned staging for " + what +
                                                    " failed: " + cudaGetErrorString(err));
  }
  block.bytes = bytes;
}

void* CudaContext::pinned(Pinned slot, size_t bytes) {
  Block& block = pinned_[static_cast<int>(slot)];
  grow_pinned(block, bytes, slot == Pinned::kGradients ? "gradients" : "the loss");
  return block.data;
}

void CudaContext::upload(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  UploadSlot& slot = uploads_[next_upload_];
  next_upload_ = (next_upload_ + 1) % kUploadSlots;
  if (slot.copied == nullptr) {
    DSCORE_GPT_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  } else {
    // The copy kUploadSlots uploads ago: long done, unless the host ran
    // that far ahead of the stream.
    const cudaError_t state = cudaEventQuery(slot.copied);
    if (state == cudaErrorNotReady)
      DSCORE_GPT_CUDA_CHECK(cudaEventSynchronize(slot.copied));
    else
      DSCORE_GPT_CUDA_CHECK(state);
  }
  // Sizes vary (the embedding index): grow in powers of two, since each
  // cudaFreeHost waits for the whole device.
  grow_pinned(slot.block, std::bit_ceil(std::max(bytes, kMinUpload)), "uploads");
  std::memcpy(slot.block.data, host, bytes);
  DSCORE_GPT_CUDA_CHECK(
      cudaMemcpyAsync(device, slot.block.data, bytes, cudaMemcpyHostToDevice, stream_));
  DSCORE_GPT_CUDA_CHECK(cudaEventRecord(slot.copied, stream_));
}

void CudaContext::remember_tokens(const int32_t* device, const int32_t* host, int64_t n) {
  tokens_[device].assign(host, host + n);
}

const std::vector<int32_t>& CudaContext::host_tokens(const int32_t* device) const {
  const auto it = tokens_.find(device);
  if (it == tokens_.end())
    throw sdk::Error(DSCORE_INTERNAL,
                     "gpt (cuda): encoder_backward got tokens that copy_tokens did not upload");
  return it->second;
}

}  // namespace dscore::gpt::gpu
