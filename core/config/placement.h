// Where a run keeps each part of its training state, decided once from the
// config: the fp32 master weights and optimizer state, stage 3's 16-bit
// parameter shards, the gradients; the partial-offload ratio; the model's
// and the gradients' dtypes. The engine, the memory plan and the ZeRO
// strategies read a Placement; none of them looks at the stage or the
// offload keys to derive these facts again.
//
// The rules a run must satisfy about placement (NVMe at stage 0, parameters
// on NVMe for an fp32 model, parameter offload from a GPU without the
// optimizer's, ...) live here too: placement_errors() for what `dscore run`,
// `dscore plan` and Engine::create refuse, placement_notices() for what a
// loaded config is told (config.h adds them at load).
#pragma once

#include <dscore/plugin.h>

#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/training_config.h"

namespace dscore::config {

// Where a part of the state lives.
enum class Home {
  kDevice,  // with the computation: the device's memory (host memory on a CPU)
  kHost,    // host memory apart from the device (pinned where it helps)
  kNvme,    // swap files under an nvme_path, streamed through the swapper plugin
};
const char* home_name(Home home);  // "device", "host", "nvme"

struct Placement {
  int stage = 0;  // ZeRO stage 0-3
  dscore_dtype model_dtype = DSCORE_DTYPE_F32;
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;  // accumulation and reduction
  // The master weights' dtype: fp32, or the model's 16-bit dtype when the
  // model's parameters are the master (bf16_master_weights_and_grads at
  // stages 1-3: no fp32 copy); and the optimizer state's storage dtype
  // (bf16 with bf16_optimizer_states; the optimizer computes in fp32).
  dscore_dtype master_dtype = DSCORE_DTYPE_F32;
  dscore_dtype state_dtype = DSCORE_DTYPE_F32;
  // Whether the host addresses the memory of the device the engine computes
  // on (a CPU), or not (a GPU: "device": "cuda").
  bool device_memory_is_host = true;

  // The owned part's fp32 master weights (a 16-bit model's) and optimizer
  // state: kHost is ZeRO-Offload (offload_optimizer "cpu" at stages 1-3),
  // kNvme ZeRO-Infinity (offload_optimizer "nvme" at stages 1-3).
  Home optimizer_state = Home::kDevice;
  // Stage 3's 16-bit parameter shards (offload_param): kHost for "cpu",
  // kNvme for "nvme" (16-bit models). kDevice at stages 0-2.
  Home parameters = Home::kDevice;
  // Gradients stay with the computation at every stage.
  Home gradients = Home::kDevice;
  // Partial offload (offload_optimizer.ratio < 1, DeepSpeed's
  // ZeRO-Offload++): the share of the owned sub-groups whose state is
  // offloaded; 1 when all of it is (always, but for ZeRO-Offload at stage 3
  // with the parameters on the device).
  double offloaded_ratio = 1.0;
  // The offload sections as configured (device kNone when absent): paths,
  // buffer counts and sizes, pipelining, pinning.
  OffloadConfig optimizer_offload;
  OffloadConfig param_offload;

  bool host_offload() const { return optimizer_state == Home::kHost; }  // ZeRO-Offload
  bool optimizer_on_nvme() const { return optimizer_state == Home::kNvme; }
  // The master weights and optimizer state are not with the parameters
  // (host or NVMe): the strategy keeps no master of its own, and the
  // update runs on the host.
  bool optimizer_offloaded() const { return optimizer_state != Home::kDevice; }
  // The 16-bit parameters are the master (low_precision_master_state.h).
  bool low_precision_master() const { return master_dtype != DSCORE_DTYPE_F32; }
  bool params_on_nvme() const { return parameters == Home::kNvme; }
  // Stage 3's shards in host memory the device does not address (offload_param
  // "cpu" from a GPU): pinned, copied to the device by each gather. On a
  // CPU offload_param "cpu" changes nothing.
  bool params_pinned_on_host() const { return parameters == Home::kHost && !device_memory_is_host; }
  bool partial_offload() const { return host_offload() && offloaded_ratio < 1.0; }
  // Anything lives off the device: the optimizer state or the parameters.
  bool offloads() const { return optimizer_offloaded() || parameters != Home::kDevice; }
  // The swapper plugin is needed (NVMe for the state or the parameters).
  bool uses_nvme() const { return optimizer_on_nvme() || params_on_nvme(); }
};

// The placement of `config`. `device_memory_is_host`: whether the host
// addresses the engine's device memory (device.h memory_is_host()); unset:
// on a CPU unless "device" is "cuda". Total: a setting the run cannot honour
// (NVMe state at stage 0) is placed where it would run (kDevice) and
// placement_errors() says so.
Placement make_placement(const TrainingConfig& config,
                         std::optional<bool> device_memory_is_host = std::nullopt);

// Dtypes a config trains with (docs/deepspeed-reference.md#derived-settings):
// the model's, and the gradient accumulation's (data_types.grad_accum_dtype,
// else fp32 for bf16 at stage 0, else the model's).
dscore_dtype model_dtype_of(const TrainingConfig& config);
dscore_dtype grad_dtype_of(const TrainingConfig& config);

// The tile buffers NVMe optimizer offload streams through: 1 +
// pipeline_read + pipeline_write (buffer_count must cover them).
int64_t nvme_tile_buffers(const OffloadConfig& offload);

// Offload settings that cannot work, each with the key and the fix:
// optimizer state on NVMe at stage 0, or without nvme_path or with too few
// buffers for its pipeline (`dscore plan` and the engine refuse them as
// invalid arguments).
std::vector<ConfigError> placement_errors(const TrainingConfig& config);
// The same for a placement made with the engine's own device.
std::vector<ConfigError> placement_errors(const Placement& placement);
// Placements DeepSpeed runs that dscore does not build yet: parameters on
// NVMe for an fp32 model; from a GPU, parameters off the device without the
// optimizer state, and ZeRO-Offload at stage 0 (config/run_rules.h reports
// them with the other unsupported features).
std::vector<ConfigError> placement_unsupported(const Placement& placement);

// What a loaded config is told about its placement: offload_param below
// stage 3 is ignored, a partial-offload ratio that this placement cannot
// honour offloads everything.
std::vector<ConfigNotice> placement_notices(const TrainingConfig& config);

// Why offload_optimizer "cpu" leaves the optimizer state with the
// parameters (stage 0; a 16-bit master on the CPU engine), for the log and
// the plan; "" where it does not.
std::string optimizer_offload_kept_reason(const Placement& placement);

// One line for logs and `dscore plan`: "optimizer and master: host
// (ZeRO-Offload); parameters: device; gradients: device; model bf16,
// gradients bf16".
std::string describe(const Placement& placement);

}  // namespace dscore::config
