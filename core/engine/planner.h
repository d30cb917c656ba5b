// `dscore plan`: the per-rank memory and communication plan of a config at
// a given world size, before anything is allocated. Creates only the model
// (to read its layout) and the optimizer (to read its state slots); no
// parameters, no communicator.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/engine/initialize.h"
#include "core/zero/plan.h"

namespace dscore {

// The optimizer plugin's declared state slots, as the plan counts them.
std::vector<zero::StateSlot> state_slots_of(const plugin_host::OptimizerInstance& optimizer);

// This node's capacity for `plan`: MemAvailable from /proc/meminfo and, when
// the plan swaps to NVMe, the free bytes of the file system holding its
// nvme_path (or the nearest existing folder above it). A figure that cannot
// be read stays unknown (and unchecked).
zero::NodeCapacity read_node_capacity(const zero::ZeroPlan& plan, int local_ranks);

// Engine::create, before anything is allocated: the offload settings the
// plan needs (invalid argument), then this rank's plan against this node's
// RAM and disk, shared by `job.ranks_on_node()` ranks (zero::check_fits).
Status check_job_fits(const config::TrainingConfig& config, const ParamLayout& layout,
                      const std::vector<zero::StateSlot>& slots, const comm::JobEnv& job);

// Config problems come back in setup->loaded.errors (print them like
// `config check`); other failures as a Status.
Result<std::vector<zero::ZeroPlan>> plan_job(const Setup& setup, int world_size);

}  // namespace dscore
