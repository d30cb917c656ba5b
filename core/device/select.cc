// select_device and cpu_streams_from_env (select.h).
#include "core/device/select.h"

#include <cstdlib>
#include <string>

#ifdef DSCORE_DEVICE_WITH_CUDA
#include "core/device/cuda_device.h"
#endif

namespace dscore::device {
namespace {

Result<std::unique_ptr<Device>> open_cuda(int local_rank, int count) {
#ifdef DSCORE_DEVICE_WITH_CUDA
  return open_cuda_device(local_rank % count);
#else
  (void)local_rank, (void)count;
  return failed_precondition("no CUDA in this build");  // unreachable: count is 0
#endif
}

}  // namespace

int visible_cuda_devices() {
#ifdef DSCORE_DEVICE_WITH_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

bool built_with_cuda() {
#ifdef DSCORE_DEVICE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

Result<CpuStreams> cpu_streams_named(const std::optional<std::string>& value) {
  const std::string text = value.value_or("");
  if (text.empty() || text == "async") return CpuStreams::kAsynchronous;
  if (text == "sync") return CpuStreams::kSynchronous;
  return invalid_argument("DSCORE_CPU_STREAMS=\"" + text +
                          "\": expected \"async\" (each stream on a worker thread of its own, the "
                          "default) or \"sync\" (tasks run on the calling thread)");
}

Result<CpuMemory> cpu_memory_named(const std::optional<std::string>& value) {
  const std::string text = value.value_or("");
  if (text.empty() || text == "shared") return CpuMemory::kShared;
  if (text == "separate") return CpuMemory::kSeparate;
  return invalid_argument("DSCORE_CPU_DEVICE_MEMORY=\"" + text +
                          "\": expected \"shared\" (the default) or \"separate\" (the engine "
                          "moves data to and from device memory as on a GPU)");
}

Result<std::unique_ptr<Device>> select_device(std::string_view requested, int local_rank,
                                              CpuStreams cpu_streams, CpuMemory cpu_memory) {
  if (requested != "auto" && requested != "cpu" && requested != "cuda") {
    return invalid_argument("\"device\": \"" + std::string(requested) +
                            "\": expected \"auto\", \"cpu\" or \"cuda\"");
  }
  if (local_rank < 0) {
    return invalid_argument("local_rank " + std::to_string(local_rank) +
                            " is negative: the launcher sets LOCAL_RANK to 0, 1, ...");
  }
  if (requested == "cpu")
    return std::unique_ptr<Device>(std::make_unique<CpuDevice>(cpu_streams, cpu_memory));
  const int count = visible_cuda_devices();
  if (count > 0) return open_cuda(local_rank, count);
  if (requested == "auto") {
    return std::unique_ptr<Device>(std::make_unique<CpuDevice>(cpu_streams, cpu_memory));
  }
  if (!built_with_cuda()) {
    return failed_precondition(
        "\"device\": \"cuda\" but this dscore was built without CUDA (DSCORE_WITH_CUDA); "
        "set \"device\": \"cpu\" or \"auto\", or build with -DDSCORE_WITH_CUDA=ON");
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return failed_precondition(
      std::string("\"device\": \"cuda\" but no CUDA device is visible (CUDA_VISIBLE_DEVICES=") +
      (visible != nullptr ? "\"" + std::string(visible) + "\"" : std::string("unset")) +
      "); set \"device\": \"cpu\" or \"auto\", or check CUDA_VISIBLE_DEVICES and the GPU driver");
}

}  // namespace dscore::device
