// What a rank needs of the node it runs on, checked before the engine
// allocates anything: its plan (zero/plan.h) with the activations the model
// declares and the process measured, against the node's RAM, disk and the
// rank's GPU memory. `dscore plan` (app/planner.h) reports the same figures.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/comm/job_env.h"
#include "core/comm/topology.h"
#include "core/config/training_config.h"
#include "core/device/device.h"
#include "core/plugin_host/instances.h"
#include "core/zero/param_layout.h"
#include "core/zero/plan.h"

namespace dscore {

// The optimizer plugin's declared state slots, as the plan counts them.
std::vector<zero::StateSlot> state_slots_of(const plugin_host::OptimizerInstance& optimizer);

// This node's capacity for `plan`: MemAvailable from /proc/meminfo and, when
// the plan swaps to NVMe, the free bytes of the file system holding its
// nvme_path (or the nearest existing folder above it). A figure that cannot
// be read stays unknown (and unchecked).
zero::NodeCapacity read_node_capacity(const zero::ZeroPlan& plan, int local_ranks);

// This process's resident memory (VmRSS) and its peak so far (VmHWM), from
// /proc/self/status; nullopt where unreadable.
std::optional<int64_t> resident_bytes();
std::optional<int64_t> peak_resident_bytes();

// Whether the config's model checkpoints activations: DeepSpeed's
// activation_checkpointing section, a pipeline's
// activation_checkpoint_interval > 0, or the model's own
// "checkpoint_activations" param.
bool checkpoints_activations(const config::TrainingConfig& config);

// A model's activation memory for one micro-batch: with checkpointing off
// (false) or on (true); UNIMPLEMENTED when the model does not declare it.
using ActivationQuery = std::function<Result<uint64_t>(bool checkpointing)>;

// What a rank holds beyond its model states and buffers (zero::ProcessMemory):
// the model's activations, and the process measured now plus what this
// process does not hold yet. `in_job`: this process is the rank itself,
// its communicator already started (Engine::create); false for
// `dscore plan`, which adds what an MPI rank holds beyond a plain process.
zero::ProcessMemory measure_process_memory(const config::TrainingConfig& config,
                                           const std::string& model_name,
                                           const ActivationQuery& activations, int world_size,
                                           bool in_job);

// Engine::create, before anything is allocated: the placement's errors
// (invalid argument), then this rank's plan (with `process`: activations
// and the process included) against this node's RAM and disk, shared by
// `job.ranks_on_node()` ranks, and the memory of the rank's `device` where
// the host does not address it (a GPU; zero::check_fits). Without a
// device: where the config's "device" says.
// Under a pipeline (`stage`): ZeRO partitions over the stage's
// data-parallel ranks, and the executor keeps buffers of its own
// (pipeline::executor_bytes).
struct StageFit {
  int data_parallel = 1;
  int data_parallel_rank = 0;
  int64_t executor_bytes = 0;
  // Expert parallelism: the experts' partition over their
  // expert-data-parallel ranks (0: no experts apart).
  int expert_data_parallel = 0;
  int expert_data_parallel_rank = 0;
};
// This rank's fit under `topology`: its ZeRO group (a pipeline stage's or
// tensor-parallel part's data- and sequence-parallel ranks) and, with an
// expert axis, its expert-data-parallel ranks.
StageFit stage_fit(const comm::Topology& topology, int64_t executor_bytes);
Status check_job_fits(const config::TrainingConfig& config, const ParamLayout& layout,
                      const std::vector<zero::StateSlot>& slots, const comm::JobEnv& job,
                      const std::optional<zero::ProcessMemory>& process = std::nullopt,
                      const device::Device* device = nullptr,
                      const std::optional<StageFit>& stage = std::nullopt);

}  // namespace dscore
