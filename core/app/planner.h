// `dscore plan`: the per-rank memory and communication plan of a config at
// a given world size, before anything is allocated. Creates only the model
// (to read its layout) and the optimizer (to read its state slots); no
// parameters, no communicator.
#pragma once

#include <optional>
#include <vector>

#include "core/base/status.h"
#include "core/engine/initialize.h"
#include "core/zero/plan.h"

namespace dscore {

// Config problems come back in setup->loaded.errors (print them like
// `config check`); other failures as a Status.
Result<std::vector<zero::ZeroPlan>> plan_job(const Setup& setup, int world_size);

// The model's forward FLOPs for one sample (the sum of its layers'
// layer_flops at batch 1); nullopt when the config has no model or the
// model plugin does not report them.
Result<std::optional<double>> forward_flops_per_sample(const Setup& setup);

// What generation's KV cache holds for one sequence of the model's whole
// context (model.h decode_cache_bytes), and that context; nullopt when the
// config has no model or the model has no KV-cached generation.
struct KvCachePlan {
  uint64_t bytes_per_sequence = 0;
  int64_t context = 0;
};
Result<std::optional<KvCachePlan>> kv_cache_per_sequence(const Setup& setup);

}  // namespace dscore
