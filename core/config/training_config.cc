// What TrainingConfig's own types say of themselves (training_config.h).
#include "core/config/training_config.h"

#include <algorithm>

#include "core/base/status.h"
#include "core/config/config.h"

namespace dscore::config {

const char* offload_device_name(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
    case OffloadDevice::kNone:
      break;
  }
  return "none";
}

int64_t pipeline_stages_of(const TrainingConfig& config) {
  if (config.pipeline.stages > 0) return config.pipeline.stages;
  if (config.pipeline_parallel_size > 0) return config.pipeline_parallel_size;
  return 1;
}

int64_t tensor_parallel_size_of(const TrainingConfig& config) {
  return std::max<int64_t>(1, config.tensor_parallel.autotp_size);
}

int64_t sequence_parallel_size_of(const TrainingConfig& config) {
  return std::max<int64_t>(1, config.sequence_parallel_size);
}

int64_t expert_parallel_size_of(const TrainingConfig& config) {
  return config.expert_parallel.enabled ? std::max<int64_t>(1, config.expert_parallel.autoep_size)
                                        : 1;
}

AioConfig default_aio() {
  const LoadedConfig loaded =
      load_config_text(R"({"train_batch_size": 1})", "default aio", ResolveContext{});
  DSCORE_CHECK(loaded.ok(), "a config of one key does not load");
  return loaded.config->aio;
}

json::Value aio_json(const AioConfig& aio) {
  json::Value out = json::Value::object();
  out.set("block_size", json::Value(aio.block_size));
  out.set("queue_depth", json::Value(aio.queue_depth));
  out.set("intra_op_parallelism", json::Value(aio.intra_op_parallelism));
  out.set("single_submit", json::Value(aio.single_submit));
  out.set("overlap_events", json::Value(aio.overlap_events));
  return out;
}

}  // namespace dscore::config
