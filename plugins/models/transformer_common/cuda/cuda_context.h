// What the GPT model's CUDA backend owns per model instance: the device it
// computes on (the current device when the model is created), one stream
// that every copy, kernel and cuBLAS call goes to in order, a cuBLAS handle
// with its own workspace, a stream-ordered memory pool (activations and
// per-layer parameter/gradient copies are reused, not re-allocated), named
// scratch buffers that grow, and pinned staging for downloads and uploads.
// Not thread-safe: one model, one calling thread (model.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dscore::gpt::gpu {

// Throw sdk::Error naming the call, the CUDA/cuBLAS error and the place.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

// Throws UNAVAILABLE, naming `model` (its "device": "cuda") and why, when
// no CUDA device is visible.
void require_cuda_device(const char* model);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

#define DSCORE_GPT_CUDA_CHECK(call)                                                 \
  do {                                                                              \
    const cudaError_t dscore_err_ = (call);                                         \
    if (dscore_err_ != cudaSuccess)                                                 \
      ::dscore::gpt::gpu::throw_cuda_error(dscore_err_, #call, __FILE__, __LINE__); \
  } while (0)
#define DSCORE_GPT_CUBLAS_CHECK(call)                                                    \
  do {                                                                                   \
    const cublasStatus_t dscore_status_ = (call);                                        \
    if (dscore_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::dscore::gpt::gpu::throw_cublas_error(dscore_status_, #call, __FILE__, __LINE__); \
  } while (0)

// Scratch buffers by purpose (each grows to the largest request).
enum class Scratch : int {
  kParamStaging,      // raw bytes of one uploaded parameter before conversion
  kScores,            // (NH, T, T) fp32: one sample's attention scores or their gradient
  kAttentionGrad,     // (NH, T, T) S: the softmax input gradient
  kAttentionRowDots,  // (B, NH, T) fp32: the fused backward's dout . out per query row
  kLogits,            // (rows, V padded to 64) fp32: one chunk of LM head logits
  kLogitGrads,        // (rows, V padded to 64) S: their gradient, when S is not fp32
  kHeadWeightGrad,    // (V, C) fp32: wte's LM head gradient, when S is not fp32
  kColumnPartials,    // column_sum_partials(N, C) fp32
  kEmbeddingIndex,    // the encoder backward's token -> rows index (int32)
  kRowLoss,           // (N) fp64 per-row cross-entropy
  kGatheredRows,      // (rows, C) S: forward()'s last positions
  kCount
};

// Pinned host buffers by purpose (each grows to the largest request).
enum class Pinned : int {
  kGradients,  // gradients downloaded into host views
  kRowLoss,    // (N) fp64 per-row cross-entropy, downloaded
  kCount
};

class CudaContext {
 public:
  CudaContext();
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // cuBLAS on stream(), with its workspace: allocated at the first call
  // (stream-ordered), so that a model made before the engine checks the
  // GPU's free memory holds none of the memory it declares
  // (cuda_pass_memory.h counts the workspace with the activations).
  cublasHandle_t blas();
  // Make this context's device current on the calling thread.
  void make_current() const;
  void synchronize() const;
  // Computes on `stream` from here on: the host's (dscore_model_hooks'
  // stream, for one call), or nullptr for the context's own. Work on the
  // new stream starts after the work queued on the previous one (an event;
  // the host does not wait).
  void use_stream(cudaStream_t stream);
  // Whether the work goes on the host's stream: the host then orders its
  // later work after it (model.h), so device views may be handed back
  // (release, grads_ready) before the work on them is done.
  bool host_orders() const { return stream_ != own_stream_; }

  // Device memory, stream-ordered on stream(): usable by work enqueued
  // after the call; release() makes it reusable by work enqueued after it.
  // Throws DSCORE_RESOURCE_EXHAUSTED naming the size when the GPU is full.
  void* allocate(size_t bytes, const char* what);
  void release(void* p) noexcept;
  // A scratch buffer of at least `bytes`; valid until the next call for the
  // same slot (stream order keeps earlier users correct).
  void* scratch(Scratch slot, size_t bytes);
  // Pinned host memory of at least `bytes`, for downloads; valid until the
  // next call for the same slot.
  void* pinned(Pinned slot, size_t bytes);
  // Copies `bytes` of host memory to `device` in stream order without
  // waiting for the stream: through pinned staging (from pageable memory
  // cudart would wait for the stream's earlier work). `host` may be reused
  // when the call returns.
  void upload(void* device, const void* host, size_t bytes);

  // copy_tokens keeps a host copy of each token array it uploads, keyed by
  // its device address: the encoder backward builds its index from it.
  void remember_tokens(const int32_t* device, const int32_t* host, int64_t n);
  const std::vector<int32_t>& host_tokens(const int32_t* device) const;

 private:
  void destroy() noexcept;

  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
  };
  // Grows `block` (pinned) to at least `bytes`.
  static void grow_pinned(Block& block, size_t bytes, const char* what);
  // upload()'s staging: a ring of buffers, each reused once the copy that
  // last read it is done (its event).
  struct UploadSlot {
    Block block;
    cudaEvent_t copied = nullptr;
  };
  static constexpr int kUploadSlots = 8;
  int device_ = 0;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the one in use: own_stream_ or the host's
  cudaEvent_t handoff_ = nullptr;  // orders a stream change
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  cudaMemPool_t pool_ = nullptr;  // null where the device has no memory pools: cudaMalloc
  Block scratch_[static_cast<int>(Scratch::kCount)];
  Block pinned_[static_cast<int>(Pinned::kCount)];
  UploadSlot uploads_[kUploadSlots];
  int next_upload_ = 0;
  std::unordered_map<const int32_t*, std::vector<int32_t>> tokens_;
};

}  // namespace dscore::gpt::gpu
