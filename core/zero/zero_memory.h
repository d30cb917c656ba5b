// Where ZeRO's buffers come from: the engine's device (Device::allocate;
// device memory on a GPU, counted host memory on the CPU device) when the
// context names one, counted host memory otherwise (strategies built without
// an engine, in unit tests). Either way a device::Buffer, recorded in the
// process memory ledger under the buffer's use and name.
//
// Code that reads or writes such a buffer on the host goes through
// upload()/download() (a copy on a stream of the device, then a wait), never
// through the pointer: on a GPU the pointer is device memory.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <string_view>

#include "core/base/memory.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "core/device/device.h"
#include "core/tensor/host_buffer.h"

namespace dscore::zero {

// max(elements, 1) elements of `dtype`, zeroed unless `fill` says
// otherwise, in the device's memory (or `placement`). RESOURCE_EXHAUSTED
// names `name` and the size.
Result<device::Buffer> allocate_buffer(device::Device* device, int64_t elements, dscore_dtype dtype,
                                       MemoryUse use, std::string_view name,
                                       tensor::Fill fill = tensor::Fill::kZero,
                                       device::Placement placement = device::Placement::kDevice);

// Uninitialised scratch for work on `stream` that may still be queued when
// the Buffer is destroyed (Device::allocate_scratch: freed in the stream's
// order), such as a buffer a comm-stream task allocates and drops. Host
// memory without a device.
Result<device::Buffer> allocate_scratch(device::Device* device, device::Stream* stream,
                                        int64_t elements, dscore_dtype dtype, MemoryUse use,
                                        std::string_view name);

// A collective's buffer in memory from allocate_buffer, typed with the
// device's tensor type and ordinal (host memory without a device), so a
// backend that moves device memory (nccl) takes it as it is.
comm::CommBuffer device_buffer(const device::Device* device, void* data, dscore_dtype dtype,
                               int64_t numel);

// Make a view (param_layout.h param_view) name where allocate_buffer's
// memory lives: the device's tensor type and ordinal (CPU without a device).
void place_view(dscore_tensor* view, const device::Device* device);

// Host memory -> a buffer of allocate_buffer, and back: `bytes` bytes
// copied on `stream`, which is then synchronised (its sticky status is the
// result). Without a device (or stream) a plain memcpy.
Status upload(device::Device* device, device::Stream* stream, void* dst, const void* src,
              size_t bytes);
Status download(device::Device* device, device::Stream* stream, void* dst, const void* src,
                size_t bytes);

}  // namespace dscore::zero
