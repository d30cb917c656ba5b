// The device the engine computes on: memory, streams and events
// (docs/architecture.md#devices). One interface, two implementations:
//
//   CpuDevice   host memory; each stream either runs its work at once on the
//               calling thread (synchronous) or on a worker thread of its own
//               (asynchronous), so every ordering rule of the GPU path (a
//               missing wait between streams) shows on any machine, as a
//               wrong number or a TSan report;
//   CudaDevice  device memory from a stream-ordered pool, cudaStream_t,
//               cudaEvent_t (cuda_device.h, built with CUDA).
//
// Work reaches a stream as a task (a function returning Status). On a CPU
// stream the task is the work itself. On a CUDA stream the task runs at once
// on the calling thread and ENQUEUES the work on native() (kernels,
// cudaMemcpyAsync, NCCL calls); it must not block. Engine code written as
// tasks therefore drives both devices unchanged:
//
//   comm.enqueue([&] { return backend.allreduce(send, recv, comm.native()); });
//   compute.wait(comm.record());   // compute work after this sees the result
//
// Failures are sticky per stream: once a task fails, later tasks of that
// stream do not run and report the same status, and so does every stream
// that waits on one of its events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/memory.h"
#include "core/base/status.h"

namespace dscore::device {

enum class DeviceType { kCpu, kCuda };
const char* device_type_name(DeviceType type);  // "cpu", "cuda"

// Where a buffer lives. On a CPU device all three are host memory (pinned
// is locked best-effort); the ledger still records the placement asked for.
enum class Placement { kHost, kPinned, kDevice };

// Marks a point in a stream: done when everything enqueued on that stream
// before record() has completed.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling thread until done; the first failure of the stream
  // up to this point, else OK.
  virtual Status wait() = 0;
  // Without blocking.
  virtual bool done() const = 0;
};
using EventPtr = std::shared_ptr<Event>;

// Waits for `event` on the calling thread; OK for none.
inline Status wait_for(const EventPtr& event) { return event ? event->wait() : Status::Ok(); }

class Stream {
 public:
  using Task = std::function<Status()>;
  virtual ~Stream() = default;  // finishes what was enqueued

  virtual std::string_view name() const = 0;
  // Runs `task` after everything enqueued before it (see the file comment).
  virtual void enqueue(Task task) = 0;
  virtual EventPtr record() = 0;
  // Work enqueued after this call starts only once `event` (from any stream
  // of the same device) is done.
  virtual void wait(const EventPtr& event) = 0;
  // Blocks until everything enqueued so far is done; the sticky status.
  virtual Status synchronize() = 0;
  // The sticky status as far as it is known, without waiting (a CPU
  // worker's later failures are not known yet).
  virtual Status status() const = 0;
  // cudaStream_t for CUDA streams, nullptr for CPU streams. Comm and
  // optimizer plugins take it as their `stream` argument.
  virtual void* native() const = 0;
  // Nanoseconds callers spent blocked in this stream's enqueue, wait() on
  // its events and synchronize() (the "comm wait" of the step timers).
  virtual int64_t blocked_ns() const = 0;

  // enqueue + record.
  EventPtr submit(Task task) {
    enqueue(std::move(task));
    return record();
  }
  // enqueue + synchronize.
  Status run(Task task) {
    enqueue(std::move(task));
    return synchronize();
  }
};

// An owned buffer from Device::allocate, counted in the process ledger.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, Placement placement, std::function<void(void*)> free)
      : data_(data), bytes_(bytes), placement_(placement), free_(std::move(free)) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = other.data_, bytes_ = other.bytes_, placement_ = other.placement_;
      free_ = std::move(other.free_);
      other.data_ = nullptr, other.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Placement placement() const { return placement_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset() {
    if (data_ && free_) free_(data_);
    data_ = nullptr, bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Placement placement_ = Placement::kHost;
  std::function<void(void*)> free_;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceType type() const = 0;
  virtual int index() const = 0;  // the CUDA ordinal; 0 on CPU
  // One line for the log: "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)",
  // "cpu (asynchronous streams)".
  virtual std::string describe() const = 0;
  // Whether host code may read and write kDevice memory. False on a GPU;
  // the CPU device says false on request (CpuMemory::kSeparate), so the
  // paths that move data between the device and host buffers run there too.
  virtual bool memory_is_host() const = 0;
  // Bytes of the device's memory still free (cudaMemGetInfo); nullopt for
  // the CPU device, whose memory is the host's.
  virtual std::optional<int64_t> available_bytes() const { return std::nullopt; }
  // The DLPack device type tensors in kDevice memory carry.
  virtual int32_t tensor_device_type() const = 0;

  virtual Result<std::unique_ptr<Stream>> create_stream(std::string name) = 0;
  // Zero-filled unless `zero` is false. RESOURCE_EXHAUSTED names `name` and
  // the size. Device memory may be in use by work still queued on a stream
  // when the Buffer is destroyed: synchronise the streams that use it first.
  virtual Result<Buffer> allocate(size_t bytes, Placement placement, MemoryUse use,
                                  std::string_view name, bool zero = true) = 0;
  // Device memory (uninitialised) for work on `stream` that may still be
  // queued when the Buffer is destroyed: the memory is freed in the
  // stream's order, after that work (a buffer a stream task allocates and
  // drops). It may be allocated in that order too (CUDA with a memory pool,
  // without a host wait): only work enqueued on `stream` after the call, or
  // ordered after that work by an event, may use it. On the CPU device a
  // task's work is done when it returns, so this is allocate(kDevice) there.
  virtual Result<Buffer> allocate_scratch(size_t bytes, Stream& stream, MemoryUse use,
                                          std::string_view name) {
    (void)stream;
    return allocate(bytes, Placement::kDevice, use, name, false);
  }
  // Enqueue a copy between any two placements of this device on `stream`.
  virtual void copy(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  virtual void fill_zero(void* dst, size_t bytes, Stream& stream) = 0;
};

}  // namespace dscore::device
