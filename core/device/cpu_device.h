// The CPU implementation of the device (device.h). Memory is host memory.
// Streams are either synchronous (a task runs at once on the caller: the
// reference path) or asynchronous (each stream a worker thread running its
// tasks in order; events and waits order the workers as CUDA events order
// CUDA streams). The engine gives the same bits on both; the asynchronous
// mode is how CI exercises the GPU path's ordering rules without a GPU.
#pragma once

#include <memory>
#include <string>

#include "core/device/device.h"

namespace dscore::device {

enum class CpuStreams { kSynchronous, kAsynchronous };

// kShared: the engine reads and writes device memory from the host where
// that is quicker (it is host memory). kSeparate: the engine treats it as a
// GPU's (memory_is_host() false) and moves data between it and host buffers
// with copies on streams, as from a GPU: how tests run those paths here.
enum class CpuMemory { kShared, kSeparate };

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(CpuStreams streams, CpuMemory memory = CpuMemory::kShared)
      : streams_(streams), memory_(memory) {}
  CpuStreams streams() const { return streams_; }

  DeviceType type() const override { return DeviceType::kCpu; }
  int index() const override { return 0; }
  std::string describe() const override;
  bool memory_is_host() const override { return memory_ == CpuMemory::kShared; }
  int32_t tensor_device_type() const override;
  Result<std::unique_ptr<Stream>> create_stream(std::string name) override;
  Result<Buffer> allocate(size_t bytes, Placement placement, MemoryUse use, std::string_view name,
                          bool zero = true) override;
  void copy(void* dst, const void* src, size_t bytes, Stream& stream) override;
  void fill_zero(void* dst, size_t bytes, Stream& stream) override;

 private:
  CpuStreams streams_;
  CpuMemory memory_;
};

// A stream of the CPU device, usable on its own (the engine's comm thread).
std::unique_ptr<Stream> make_cpu_stream(std::string name, CpuStreams mode);

}  // namespace dscore::device
