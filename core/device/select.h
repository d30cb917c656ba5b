// Choosing the device a run computes on, from the config's "device"
// ("auto", "cpu", "cuda") and the rank's local_rank, and how CPU streams run
// (DSCORE_CPU_STREAMS). "auto" takes a GPU when one is visible.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/device/cpu_device.h"

namespace dscore::device {

// Whether this dscore was built with CUDA (DSCORE_WITH_CUDA).
bool built_with_cuda();
// CUDA devices this process sees; 0 without CUDA, a driver or a GPU.
int visible_cuda_devices();

// DSCORE_CPU_STREAMS's value (the program reads it: engine/environment.h):
// "async" (also the default when unset or empty: the comm stream overlaps
// compute) or "sync" (everything on the calling thread: the reference the
// asynchronous path equals bit for bit). INVALID_ARGUMENT naming the
// variable for anything else.
Result<CpuStreams> cpu_streams_named(const std::optional<std::string>& value);
// DSCORE_CPU_DEVICE_MEMORY's value: "shared" (the default when unset or
// empty) or "separate" (CpuMemory::kSeparate: for tests of the paths a GPU
// takes). INVALID_ARGUMENT naming the variable for anything else.
Result<CpuMemory> cpu_memory_named(const std::optional<std::string>& value);

// "auto": CUDA device local_rank % count when CUDA devices are visible,
// else the CPU device with `cpu_streams` and `cpu_memory`. "cpu": the CPU device. "cuda": the
// CUDA device local_rank % count; FAILED_PRECONDITION naming the config key
// and the fix where there is none (or the build has no CUDA).
// INVALID_ARGUMENT for another value or a negative local_rank.
Result<std::unique_ptr<Device>> select_device(std::string_view requested, int local_rank,
                                              CpuStreams cpu_streams,
                                              CpuMemory cpu_memory = CpuMemory::kShared);

}  // namespace dscore::device
