// The one place that reads the stage and the offload keys to decide where
// state lives, and the rules about it (placement.h).
#include "core/config/placement.h"

#include <dscore/cpp/dtype.hpp>

namespace dscore::config {
namespace {

dscore_dtype dtype_named(const std::string& name) {
  if (name == "fp16") return DSCORE_DTYPE_F16;
  if (name == "bf16") return DSCORE_DTYPE_BF16;
  return DSCORE_DTYPE_F32;
}

const std::string kOptimizerKey = "zero_optimization.offload_optimizer.";
const std::string kParamKey = "zero_optimization.offload_param.";

}  // namespace

const char* home_name(Home home) {
  switch (home) {
    case Home::kDevice:
      return "device";
    case Home::kHost:
      return "host";
    case Home::kNvme:
      return "nvme";
  }
  return "?";
}

int64_t nvme_tile_buffers(const OffloadConfig& offload) {
  return 1 + (offload.pipeline_read ? 1 : 0) + (offload.pipeline_write ? 1 : 0);
}

dscore_dtype model_dtype_of(const TrainingConfig& config) {
  if (config.fp16.enabled) return DSCORE_DTYPE_F16;
  if (config.bf16.enabled) return DSCORE_DTYPE_BF16;
  return DSCORE_DTYPE_F32;
}

dscore_dtype grad_dtype_of(const TrainingConfig& config) {
  if (config.grad_accum_dtype) return dtype_named(*config.grad_accum_dtype);
  const dscore_dtype md = model_dtype_of(config);
  if (md == DSCORE_DTYPE_BF16 && config.zero.stage == 0) return DSCORE_DTYPE_F32;
  return md;
}

Placement make_placement(const TrainingConfig& config, std::optional<bool> device_memory_is_host) {
  Placement p;
  p.stage = config.zero.stage;
  p.model_dtype = model_dtype_of(config);
  p.grad_dtype = grad_dtype_of(config);
  p.device_memory_is_host = device_memory_is_host.value_or(config.device != "cuda");
  if (config.zero.offload_optimizer) p.optimizer_offload = *config.zero.offload_optimizer;
  if (config.zero.offload_param) p.param_offload = *config.zero.offload_param;
  // The optimizer state moves only where a rank owns a partition of it
  // (stages 1-3); at stage 0 it stays with the parameters.
  if (p.stage > 0) {
    if (p.optimizer_offload.device == OffloadDevice::kCpu) p.optimizer_state = Home::kHost;
    if (p.optimizer_offload.device == OffloadDevice::kNvme) p.optimizer_state = Home::kNvme;
  }
  // Parameters move only at stage 3, and to NVMe only as 16-bit shards (an
  // fp32 model's parameters are its master weights).
  if (p.stage == 3) {
    if (p.param_offload.device == OffloadDevice::kCpu) p.parameters = Home::kHost;
    if (p.param_offload.device == OffloadDevice::kNvme && p.model_dtype != DSCORE_DTYPE_F32)
      p.parameters = Home::kNvme;
  }
  // DeepSpeed's 16-bit masters (stages 1-3; config_rules.cc refuses the
  // rest): bf16_master_weights_and_grads (with bf16_optimizer_states, the
  // state in bf16 too) and fp16_master_weights_and_grads.
  const bool bf16_master =
      p.model_dtype == DSCORE_DTYPE_BF16 && config.bf16.bf16_master_weights_and_grads;
  const bool fp16_master =
      p.model_dtype == DSCORE_DTYPE_F16 && config.fp16.fp16_master_weights_and_grads;
  if (p.stage > 0 && (bf16_master || fp16_master)) {
    p.master_dtype = p.model_dtype;
    if (bf16_master && config.bf16.bf16_optimizer_states) p.state_dtype = DSCORE_DTYPE_BF16;
    // On the CPU engine the host is the device: ZeRO-Offload of a state
    // whose master is the parameters has nothing to move (as offload_param
    // "cpu" there), so the state stays in that memory.
    if (p.device_memory_is_host && p.optimizer_state == Home::kHost)
      p.optimizer_state = Home::kDevice;
  }
  // Partial offload keeps sub-groups with the parameters: only ZeRO-Offload
  // at stage 3 whose parameters are on the device.
  if (p.host_offload() && p.stage == 3 && p.param_offload.device == OffloadDevice::kNone &&
      p.optimizer_offload.ratio < 1.0)
    p.offloaded_ratio = p.optimizer_offload.ratio;
  return p;
}

std::vector<ConfigError> placement_errors(const TrainingConfig& config) {
  return placement_errors(make_placement(config));
}

std::vector<ConfigError> placement_errors(const Placement& p) {
  std::vector<ConfigError> out;
  const OffloadConfig& o = p.optimizer_offload;
  if (o.device == OffloadDevice::kNvme) {
    if (p.stage == 0)
      out.push_back({kOptimizerKey + "device",
                     {},
                     "optimizer offload to NVMe needs ZeRO stage 1, 2 or 3 (it swaps the "
                     "partition a rank owns): set zero_optimization.stage to 1 or more, or "
                     "\"device\": \"none\""});
    if (o.nvme_path.empty())
      out.push_back({kOptimizerKey + "nvme_path",
                     {},
                     "\"device\": \"nvme\" needs \"nvme_path\": a folder on a fast local disk "
                     "for the swap files"});
    const int64_t needed = nvme_tile_buffers(o);
    if (o.buffer_count < needed)
      out.push_back({kOptimizerKey + "buffer_count",
                     {},
                     "buffer_count " + std::to_string(o.buffer_count) + " is fewer than the " +
                         std::to_string(needed) +
                         " tile buffers the swap pipeline uses (1 + pipeline_read + "
                         "pipeline_write): set buffer_count to " +
                         std::to_string(needed) + " or more, or turn a pipeline flag off"});
  }
  return out;
}

std::vector<ConfigError> placement_unsupported(const Placement& p) {
  std::vector<ConfigError> out;
  const OffloadConfig& o = p.optimizer_offload;
  if (p.stage == 3 && p.param_offload.device == OffloadDevice::kNvme &&
      p.model_dtype == DSCORE_DTYPE_F32)
    out.push_back({kParamKey + "device",
                   {},
                   "parameters on NVMe need a 16-bit model: an fp32 model's parameters are its "
                   "master weights, which the optimizer updates in memory; enable \"bf16\" (or "
                   "\"fp16\"), or set \"device\": \"none\""});
  if (p.low_precision_master() &&
      (p.optimizer_offloaded() || !p.device_memory_is_host || p.params_on_nvme()))
    out.push_back({p.master_dtype == DSCORE_DTYPE_F16 ? "fp16.fp16_master_weights_and_grads"
                                                      : "bf16.bf16_master_weights_and_grads",
                   {},
                   "16-bit master weights are implemented on the CPU engine with the optimizer "
                   "state and the parameters in memory only (not on NVMe, not from a GPU): "
                   "remove the key, or the \"nvme\" offload"});
  if (!p.device_memory_is_host) {
    // From a GPU the host update of offloaded state writes the parameters
    // on the host, so parameters off the device need it; ZeRO-Offload
    // itself needs a partition to own.
    if (o.device == OffloadDevice::kCpu && p.stage == 0)
      out.push_back({kOptimizerKey + "device",
                     {},
                     "ZeRO-Offload needs ZeRO stage 1, 2 or 3: set "
                     "\"zero_optimization\": {\"stage\": 1} or higher"});
    if (p.stage == 3 && p.param_offload.device != OffloadDevice::kNone &&
        o.device == OffloadDevice::kNone)
      out.push_back({kParamKey + "device",
                     {},
                     "zero_optimization.offload_param from the GPU needs the optimizer state off "
                     "the GPU too (the update runs on the host, where it writes the parameters): "
                     "set zero_optimization.offload_optimizer.device to \"cpu\" or \"nvme\""});
  }
  return out;
}

std::vector<ConfigNotice> placement_notices(const TrainingConfig& config) {
  const Placement p = make_placement(config);
  std::vector<ConfigNotice> out;
  if (p.stage != 3 && p.param_offload.device != OffloadDevice::kNone)
    out.push_back(
        {"zero_optimization.offload_param", "only used by ZeRO stage 3; ignored at stage " +
                                                std::to_string(p.stage) + " (as in DeepSpeed)"});
  // A ratio below 1 at stage 3 that the placement does not honour (stages
  // 0-2 are DeepSpeed's error: config_rules.cc).
  if (p.stage == 3 && p.optimizer_offload.ratio < 1.0 && !p.partial_offload()) {
    const std::string why =
        p.optimizer_offload.device != OffloadDevice::kCpu
            ? "with offload_optimizer.device \"cpu\" only"
            : "not with offload_param (the parameters are not on the device to keep the state "
              "with)";
    out.push_back({"zero_optimization.offload_optimizer.ratio",
                   "partial offload is implemented " + why +
                       ": the whole optimizer state is offloaded, as with ratio 1.0 (the same "
                       "numbers; only the device's memory and the step time differ)"});
  }
  return out;
}

std::string optimizer_offload_kept_reason(const Placement& p) {
  if (p.optimizer_offload.device != OffloadDevice::kCpu || p.optimizer_offloaded()) return "";
  if (p.low_precision_master())
    return "offload_optimizer.device \"cpu\" with a 16-bit master on the CPU engine: the "
           "optimizer state stays in host memory with the parameters (the master), as it is";
  return "offload_optimizer.device \"cpu\" at ZeRO stage 0: the optimizer state stays with the "
         "parameters (ZeRO-Offload needs stage 1, 2 or 3)";
}

std::string describe(const Placement& p) {
  std::string out = "optimizer and master: ";
  out += home_name(p.optimizer_state);
  if (p.host_offload()) out += " (ZeRO-Offload)";
  if (p.optimizer_on_nvme()) out += " (ZeRO-Infinity)";
  if (p.partial_offload())
    out += ", " + std::to_string(static_cast<int>(p.offloaded_ratio * 100 + 0.5)) + "% of it";
  out += "; parameters: ";
  out += home_name(p.parameters);
  out += "; gradients: ";
  out += home_name(p.gradients);
  out += "; model ";
  out += sdk::dtype_name(p.model_dtype);
  out += ", gradients ";
  out += sdk::dtype_name(p.grad_dtype);
  if (p.low_precision_master()) {
    out += ", master ";
    out += sdk::dtype_name(p.master_dtype);
    out += " (the parameters), optimizer state ";
    out += sdk::dtype_name(p.state_dtype);
  }
  return out;
}

}  // namespace dscore::config
