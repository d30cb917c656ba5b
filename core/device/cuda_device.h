// The CUDA implementation of the device (device.h), built with
// DSCORE_WITH_CUDA. Streams are non-blocking cudaStream_t; a task runs at
// once on the caller and enqueues its work on native(). Events come from a
// small per-device pool of timing-free cudaEvent_t. Device memory comes from
// a stream-ordered pool of the device's own that keeps freed memory for
// reuse; pinned memory from cudaHostAlloc; every buffer is counted in the
// process ledger (core/base/memory.h) under its kind and use.
//
// Calls that create resources or run a task make the device current on the
// calling thread (cudaSetDevice): one device per process.
#pragma once

#include <memory>

#include "core/device/device.h"

namespace dscore::device {

// The number of CUDA devices this process sees; 0 where there is no driver
// or GPU (never fails, never prints).
int cuda_device_count();

// Opens device `ordinal` (counted after CUDA_VISIBLE_DEVICES).
// FAILED_PRECONDITION when it does not exist; the CUDA call's error when
// creating its pool or allocation stream fails.
Result<std::unique_ptr<Device>> open_cuda_device(int ordinal);

}  // namespace dscore::device
