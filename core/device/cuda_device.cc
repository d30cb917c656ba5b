// CudaDevice (cuda_device.h): streams, events from a per-device pool, and
// memory from a stream-ordered pool, all counted in the process ledger.
//
// Device memory: a pool of the device's own (cudaMemPoolCreate) with the
// release threshold at its maximum, allocated and freed with
// cudaMallocFromPoolAsync / cudaFreeAsync on a private allocation stream.
// Why a pool of its own rather than the device's default pool: keeping freed
// memory cached is this device's choice and must not change how other code
// in the process (plugins, a framework beside us) uses the default pool; and
// destroying the device hands the memory back. Why a private stream:
// allocate() takes no stream, so the allocation is ordered on that stream
// and the stream synchronised once, which makes the buffer usable on every
// stream without synchronising the device; a free is ordered after the
// frees and allocations before it, so the next allocation of that size
// reuses the block.
#include "core/device/cuda_device.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/base/strings.h"
#include "core/device/task.h"

namespace dscore::device {
namespace {

constexpr size_t kMaxPooledEvents = 64;

int64_t since_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

StatusCode code_of(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return DSCORE_RESOURCE_EXHAUSTED;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return DSCORE_UNAVAILABLE;
    default:
      return DSCORE_INTERNAL;
  }
}

// "<call> failed for <what>: <error string> (<error name>)".
Status cuda_error(cudaError_t err, std::string_view call, std::string_view what) {
  Status status(code_of(err), std::string(call) + " failed for " + std::string(what) + ": " +
                                  cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")");
  cudaGetLastError();  // clear a non-sticky error so later calls report their own
  return status;
}

// A failed allocation: "could not allocate <n> bytes (<size>) of <memory> on
// cuda:0 for <buffer>: <call>: <error string> (<error name>)".
Status allocation_error(size_t bytes, std::string_view memory, std::string_view name,
                        std::string_view label, const std::string& reason, StatusCode code) {
  return Status(code, "could not allocate " + std::to_string(bytes) + " bytes (" +
                          format_bytes(bytes) + ") of " + std::string(memory) + " on " +
                          std::string(label) + " for " + std::string(name) + ": " + reason);
}
Status allocation_error(size_t bytes, std::string_view memory, std::string_view name,
                        std::string_view label, cudaError_t err, std::string_view call) {
  Status status = allocation_error(
      bytes, memory, name, label,
      std::string(call) + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")",
      code_of(err));
  cudaGetLastError();
  return status;
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

// What the device, its streams, events and buffers share: each holds it, so
// whichever is destroyed last releases the pool and the allocation stream.
struct CudaState {
  int ordinal = 0;
  std::string label;  // "cuda:0"
  size_t total_bytes = 0;
  cudaMemPool_t pool = nullptr;  // null where the device has no memory pools: cudaMalloc
  cudaStream_t alloc_stream = nullptr;
  std::mutex alloc_mutex;  // one allocation (malloc, zero, synchronise) at a time
  std::mutex event_mutex;
  std::vector<cudaEvent_t> free_events;  // timing-free events ready to record

  ~CudaState() {
    cudaSetDevice(ordinal);
    if (alloc_stream != nullptr) {
      cudaStreamSynchronize(alloc_stream);
      cudaStreamDestroy(alloc_stream);
    }
    for (cudaEvent_t event : free_events) cudaEventDestroy(event);
    if (pool != nullptr) cudaMemPoolDestroy(pool);
    cudaGetLastError();
  }

  Status take_event(cudaEvent_t* event, std::string_view stream) {
    {
      std::lock_guard<std::mutex> lock(event_mutex);
      if (!free_events.empty()) {
        *event = free_events.back();
        free_events.pop_back();
        return Status::Ok();
      }
    }
    cudaSetDevice(ordinal);
    const cudaError_t err = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
    if (err != cudaSuccess) return cuda_error(err, "cudaEventCreateWithFlags", stream);
    return Status::Ok();
  }
  // A wait already issued on the event (cudaStreamWaitEvent) captured its
  // state then, so the event can be recorded again at once.
  void give_back(cudaEvent_t event) {
    {
      std::lock_guard<std::mutex> lock(event_mutex);
      if (free_events.size() < kMaxPooledEvents) {
        free_events.push_back(event);
        return;
      }
    }
    cudaEventDestroy(event);
  }
};

class CudaEvent final : public Event {
 public:
  // `event` null: nothing to wait for (`status` says how the stream stood).
  CudaEvent(std::shared_ptr<CudaState> state, cudaEvent_t event, Status status,
            std::shared_ptr<std::atomic<int64_t>> blocked_ns, std::string what)
      : state_(std::move(state)),
        event_(event),
        status_(std::move(status)),
        blocked_ns_(std::move(blocked_ns)),
        what_(std::move(what)) {}
  ~CudaEvent() override {
    if (event_ != nullptr) state_->give_back(event_);
  }

  Status wait() override {
    if (!status_.ok() || event_ == nullptr) return status_;
    const auto start = std::chrono::steady_clock::now();
    const cudaError_t err = cudaEventSynchronize(event_);
    *blocked_ns_ += since_ns(start);
    return err == cudaSuccess ? Status::Ok() : cuda_error(err, "cudaEventSynchronize", what_);
  }
  bool done() const override {
    if (!status_.ok() || event_ == nullptr) return true;
    return cudaEventQuery(event_) != cudaErrorNotReady;  // an error is done: wait() reports it
  }

  cudaEvent_t native() const { return event_; }
  const Status& status() const { return status_; }

 private:
  std::shared_ptr<CudaState> state_;
  cudaEvent_t event_;
  Status status_;
  std::shared_ptr<std::atomic<int64_t>> blocked_ns_;  // the recording stream's
  std::string what_;                                  // "an event of stream \"comm\" on cuda:0"
};

class CudaStream final : public Stream {
 public:
  CudaStream(std::shared_ptr<CudaState> state, std::string name, cudaStream_t stream)
      : state_(std::move(state)),
        name_(std::move(name)),
        what_("stream \"" + name_ + "\" on " + state_->label),
        stream_(stream) {}
  ~CudaStream() override {
    cudaSetDevice(state_->ordinal);
    cudaStreamSynchronize(stream_);  // finishes what was enqueued
    cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  std::string_view name() const override { return name_; }
  void* native() const override { return stream_; }
  int64_t blocked_ns() const override { return blocked_ns_->load(); }

  // Not counted as blocked: the task only launches work.
  void enqueue(Task task) override {
    if (!sticky().ok()) return;
    cudaSetDevice(state_->ordinal);
    cudaGetLastError();  // an earlier call's error is not this task's
    Status status = run_task(task, name_);
    if (status.ok()) {
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) status = cuda_error(err, "a task (cudaGetLastError after it)", what_);
    }
    if (!status.ok()) fail(std::move(status));
  }

  EventPtr record() override {
    Status status = sticky();
    cudaEvent_t event = nullptr;
    if (status.ok()) status = state_->take_event(&event, what_);
    if (status.ok()) {
      const cudaError_t err = cudaEventRecord(event, stream_);
      if (err != cudaSuccess) {
        state_->give_back(event);
        event = nullptr;
        status = cuda_error(err, "cudaEventRecord", what_);
      }
    }
    if (!status.ok()) fail(status);
    return std::make_shared<CudaEvent>(state_, event, std::move(status), blocked_ns_,
                                       "an event of " + what_);
  }

  void wait(const EventPtr& event) override {
    if (!event || !sticky().ok()) return;
    if (auto* cuda = dynamic_cast<CudaEvent*>(event.get())) {
      if (!cuda->status().ok()) return fail(cuda->status());
      if (cuda->native() == nullptr) return;
      const cudaError_t err = cudaStreamWaitEvent(stream_, cuda->native(), 0);
      if (err != cudaSuccess) fail(cuda_error(err, "cudaStreamWaitEvent", what_));
      return;
    }
    // Another device's event (a CPU stream's): the caller waits for it.
    const auto start = std::chrono::steady_clock::now();
    Status status = event->wait();
    *blocked_ns_ += since_ns(start);
    if (!status.ok()) fail(std::move(status));
  }

  Status synchronize() override {
    const auto start = std::chrono::steady_clock::now();
    const cudaError_t err = cudaStreamSynchronize(stream_);
    *blocked_ns_ += since_ns(start);
    if (err != cudaSuccess) fail(cuda_error(err, "cudaStreamSynchronize", what_));
    return sticky();
  }
  Status status() const override { return sticky(); }

 private:
  Status sticky() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sticky_;
  }
  void fail(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (sticky_.ok()) sticky_ = std::move(status);
  }

  std::shared_ptr<CudaState> state_;
  std::string name_;
  std::string what_;  // "stream \"comm\" on cuda:0", for messages
  cudaStream_t stream_;
  std::shared_ptr<std::atomic<int64_t>> blocked_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  mutable std::mutex mutex_;  // sticky_: record() and wait() may come from another thread
  Status sticky_;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(std::shared_ptr<CudaState> state, std::string description)
      : state_(std::move(state)), description_(std::move(description)) {}

  DeviceType type() const override { return DeviceType::kCuda; }
  int index() const override { return state_->ordinal; }
  std::string describe() const override { return description_; }
  bool memory_is_host() const override { return false; }
  std::optional<int64_t> available_bytes() const override {
    cudaSetDevice(state_->ordinal);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    return static_cast<int64_t>(free_bytes);
  }
  int32_t tensor_device_type() const override { return DSCORE_DEVICE_CUDA; }

  Result<std::unique_ptr<Stream>> create_stream(std::string name) override {
    cudaSetDevice(state_->ordinal);
    cudaStream_t stream = nullptr;
    const cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      return cuda_error(err, "cudaStreamCreateWithFlags",
                        "stream \"" + name + "\" on " + state_->label);
    }
    return std::unique_ptr<Stream>(std::make_unique<CudaStream>(state_, std::move(name), stream));
  }

  Result<Buffer> allocate(size_t bytes, Placement placement, MemoryUse use, std::string_view name,
                          bool zero = true) override {
    switch (placement) {
      case Placement::kDevice:
        return allocate_device(bytes, use, name, zero, nullptr);
      case Placement::kPinned:
        return allocate_pinned(bytes, use, name, zero);
      case Placement::kHost:
        break;
    }
    void* data = counted_alloc(bytes == 0 ? 1 : bytes, 64, DSCORE_MEMORY_HOST, use, name);
    if (data == nullptr) {
      return allocation_error(bytes, "host memory", name, state_->label, "out of memory",
                              DSCORE_RESOURCE_EXHAUSTED);
    }
    if (zero) std::memset(data, 0, bytes);
    return Buffer(data, bytes, placement, [](void* p) { counted_free(p, DSCORE_MEMORY_HOST); });
  }

  void copy(void* dst, const void* src, size_t bytes, Stream& stream) override {
    auto* native = static_cast<cudaStream_t>(stream.native());
    std::string what = std::to_string(bytes) + " bytes on stream \"" + std::string(stream.name()) +
                       "\" of " + state_->label;
    stream.enqueue([=, what = std::move(what)] {
      if (native == nullptr)
        return failed_precondition("a copy of " + what + ": not a CUDA stream");
      const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native);
      return err == cudaSuccess ? Status::Ok() : cuda_error(err, "cudaMemcpyAsync", what);
    });
  }

  void fill_zero(void* dst, size_t bytes, Stream& stream) override {
    auto* native = static_cast<cudaStream_t>(stream.native());
    std::string what = std::to_string(bytes) + " bytes on stream \"" + std::string(stream.name()) +
                       "\" of " + state_->label;
    stream.enqueue([=, what = std::move(what)] {
      if (native == nullptr) return failed_precondition("zeroing " + what + ": not a CUDA stream");
      const cudaError_t err = cudaMemsetAsync(dst, 0, bytes, native);
      return err == cudaSuccess ? Status::Ok() : cuda_error(err, "cudaMemsetAsync", what);
    });
  }

  Result<Buffer> allocate_scratch(size_t bytes, Stream& stream, MemoryUse use,
                                  std::string_view name) override {
    return allocate_device(bytes, use, name, false, static_cast<cudaStream_t>(stream.native()));
  }

 private:
  // `free_on`: the stream whose order the free follows (nullptr: the
  // private allocation stream, for buffers whose users were synchronised).
  // With a memory pool a buffer with such a stream is allocated in its order
  // too, without a host wait: work enqueued there after the call, and work
  // ordered after that by events, may use it. Other buffers are allocated on
  // the private stream and waited for, so any stream may use them.
  Result<Buffer> allocate_device(size_t bytes, MemoryUse use, std::string_view name, bool zero,
                                 cudaStream_t free_on) {
    if (bytes > state_->total_bytes) {
      return allocation_error(bytes, "device memory", name, state_->label,
                              "the device has " + gib(state_->total_bytes) + " in all",
                              DSCORE_RESOURCE_EXHAUSTED);
    }
    CudaState& s = *state_;
    void* data = nullptr;
    const char* call = s.pool != nullptr ? "cudaMallocFromPoolAsync" : "cudaMalloc";
    cudaError_t err = cudaSuccess;
    {
      std::lock_guard<std::mutex> lock(s.alloc_mutex);
      cudaSetDevice(s.ordinal);
      const size_t asked = bytes == 0 ? 1 : bytes;
      const cudaStream_t order = s.pool != nullptr && free_on != nullptr ? free_on : s.alloc_stream;
      err = s.pool != nullptr ? cudaMallocFromPoolAsync(&data, asked, s.pool, order)
                              : cudaMalloc(&data, asked);
      if (err == cudaSuccess && zero) {
        err = cudaMemsetAsync(data, 0, bytes, order);
        if (err != cudaSuccess) call = "cudaMemsetAsync";
      }
      if (err == cudaSuccess && order == s.alloc_stream) {
        err = cudaStreamSynchronize(s.alloc_stream);
        if (err != cudaSuccess) call = "cudaStreamSynchronize";
      }
      if (err != cudaSuccess && data != nullptr) {
        if (s.pool != nullptr)
          cudaFreeAsync(data, order);
        else
          cudaFree(data);
      }
    }
    if (err != cudaSuccess) {
      return allocation_error(bytes, "device memory", name, s.label, err, call);
    }
    process_memory().record_external(data, bytes, DSCORE_MEMORY_DEVICE, use, name);
    std::shared_ptr<CudaState> state = state_;
    return Buffer(data, bytes, Placement::kDevice, [state, free_on](void* p) {
      // Forget first: once freed, another allocation may get the address.
      process_memory().forget_external(p);
      std::lock_guard<std::mutex> lock(state->alloc_mutex);
      cudaSetDevice(state->ordinal);
      if (state->pool != nullptr)
        cudaFreeAsync(p, free_on != nullptr ? free_on : state->alloc_stream);
      else
        cudaFree(p);  // synchronises the device: queued work is done first
      cudaGetLastError();
    });
  }

  Result<Buffer> allocate_pinned(size_t bytes, MemoryUse use, std::string_view name, bool zero) {
    void* data = nullptr;
    cudaSetDevice(state_->ordinal);
    const cudaError_t err = cudaHostAlloc(&data, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      return allocation_error(bytes, "pinned host memory", name, state_->label, err,
                              "cudaHostAlloc");
    }
    if (zero) std::memset(data, 0, bytes);
    process_memory().record_external(data, bytes, DSCORE_MEMORY_PINNED, use, name);
    std::shared_ptr<CudaState> state = state_;
    return Buffer(data, bytes, Placement::kPinned, [state](void* p) {
      process_memory().forget_external(p);
      cudaFreeHost(p);
      cudaGetLastError();
    });
  }

  std::shared_ptr<CudaState> state_;
  std::string description_;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Device>> open_cuda_device(int ordinal) {
  const int count = cuda_device_count();
  if (ordinal < 0 || ordinal >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return failed_precondition(
        "cuda:" + std::to_string(ordinal) + " does not exist: " +
        (count == 0 ? std::string("no CUDA device is visible")
                    : std::to_string(count) + " CUDA device(s) visible") +
        " (CUDA_VISIBLE_DEVICES=" + (visible != nullptr ? visible : "unset") +
        "); check the driver and CUDA_VISIBLE_DEVICES");
  }
  auto state = std::make_shared<CudaState>();
  state->ordinal = ordinal;
  state->label = "cuda:" + std::to_string(ordinal);
  cudaError_t err = cudaSetDevice(ordinal);
  if (err != cudaSuccess) return cuda_error(err, "cudaSetDevice", state->label);
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) return cuda_error(err, "cudaGetDeviceProperties", state->label);
  state->total_bytes = prop.totalGlobalMem;

  int pools = 0;
  err = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal);
  if (err != cudaSuccess) return cuda_error(err, "cudaDeviceGetAttribute", state->label);
  if (pools != 0) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal;
    err = cudaMemPoolCreate(&state->pool, &props);
    if (err != cudaSuccess) return cuda_error(err, "cudaMemPoolCreate", state->label);
    uint64_t keep = UINT64_MAX;  // keep freed memory for reuse, never trim at synchronisation
    err = cudaMemPoolSetAttribute(state->pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (err != cudaSuccess) return cuda_error(err, "cudaMemPoolSetAttribute", state->label);
  }
  err = cudaStreamCreateWithFlags(&state->alloc_stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    return cuda_error(err, "cudaStreamCreateWithFlags", "the allocation stream of " + state->label);
  }
  std::string description = state->label + " (" + prop.name + ", " + gib(prop.totalGlobalMem) + ")";
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(state, std::move(description)));
}

}  // namespace dscore::device
