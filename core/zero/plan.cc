#include "core/zero/plan.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstdio>

#include "core/base/strings.h"
#include "core/zero/partition.h"

namespace dscore::zero {
namespace {

dscore_dtype dtype_named(const std::string& name) {
  if (name == "fp16") return DSCORE_DTYPE_F16;
  if (name == "bf16") return DSCORE_DTYPE_BF16;
  return DSCORE_DTYPE_F32;
}

int64_t bytes(int64_t elements, dscore_dtype dtype) {
  return elements * static_cast<int64_t>(sdk::dtype_size(dtype));
}

}  // namespace

dscore_dtype model_dtype_of(const config::TrainingConfig& config) {
  if (config.fp16.enabled) return DSCORE_DTYPE_F16;
  if (config.bf16.enabled) return DSCORE_DTYPE_BF16;
  return DSCORE_DTYPE_F32;
}

dscore_dtype grad_dtype_of(const config::TrainingConfig& config) {
  if (config.grad_accum_dtype) return dtype_named(*config.grad_accum_dtype);
  const dscore_dtype md = model_dtype_of(config);
  if (md == DSCORE_DTYPE_BF16 && config.zero.stage == 0) return DSCORE_DTYPE_F32;
  return md;
}

int64_t ZeroPlan::comm_total() const {
  int64_t total = 0;
  for (const auto& [op, elements] : comm_elements) total += elements;
  return total;
}

ZeroPlan make_plan(const config::TrainingConfig& config, const ParamLayout& layout,
                   const std::vector<StateSlot>& slots, int world, int rank) {
  ZeroPlan plan;
  plan.stage = config.zero.stage;
  plan.world = world;
  plan.rank = rank;
  plan.numel = layout.total_numel();
  plan.model_dtype = model_dtype_of(config);
  plan.grad_dtype = grad_dtype_of(config);
  const dscore_dtype md = plan.model_dtype, gd = plan.grad_dtype;
  const int64_t gas = config.batch.gradient_accumulation_steps;
  const FlatPartition flat = make_flat_partition(plan.numel, world);

  int64_t owned = 0;
  MemoryPlan& m = plan.memory;
  if (plan.stage < 3) {
    owned = plan.stage == 0 ? flat.padded_numel : flat.partition_size;
    m.parameters = bytes(flat.padded_numel, md);
    m.gradients = bytes(plan.stage <= 1 ? flat.padded_numel : flat.partition_size, gd);
    // Stages 0/1 reduce every micro-step when they accumulate across ranks
    // (grid_reduction.h), into a buffer of what they own.
    const bool every_micro_step = plan.stage <= 1 && gas > 1 && world > 1;
    if (every_micro_step) m.gradients += bytes(owned, gd);
    const int64_t reductions = plan.stage == 2 || every_micro_step ? gas : 1;
    if (plan.stage == 2) {
      const int64_t bucket =
          std::clamp<int64_t>(config.zero.reduce_bucket_size, 1, flat.padded_numel);
      const int count = config.zero.overlap_comm ? 2 : 1;
      m.buffers = bytes(bucket, gd) * count;
    }
    if (plan.stage == 0) {
      plan.comm_elements["allreduce"] = flat.padded_numel * reductions;
    } else {
      plan.comm_elements["reduce"] = flat.padded_numel * reductions;
      plan.comm_elements["allgather"] = flat.padded_numel;
    }
  } else {
    std::vector<int64_t> numels;
    for (const ParamEntry& p : layout.params()) numels.push_back(p.numel);
    const ShardedLayout shards = make_sharded_layout(numels, world);
    owned = shards.local_numel;
    m.parameters = bytes(owned, md);
    m.gradients = bytes(owned, gd);
    // Gathered parameters (one layer live plus one prefetched) and one
    // layer's full gradients; persistent parameters stay gathered.
    int64_t largest_layer = 0, persistent = 0, gathered_per_pass = 0, total = 0;
    for (size_t l = 0; l < layout.layer_count(); ++l) {
      int64_t layer = 0;
      for (size_t p = layout.layer_first(l); p < layout.layer_end(l); ++p) {
        const int64_t padded = shards.params[p].shard_size * world;
        total += padded;
        if (layout.params()[p].numel <= config.zero.param_persistence_threshold) {
          persistent += padded;
        } else {
          layer += padded;
          gathered_per_pass += padded;
        }
      }
      largest_layer = std::max(largest_layer, layer);
    }
    m.buffers = bytes(2 * largest_layer + persistent, md) + bytes(largest_layer, gd);
    // Forward and backward each gather once per micro-step (when layers are
    // released in between); gradients are reduce-scattered once.
    plan.comm_elements["allgather"] = 2 * gathered_per_pass * gas + persistent;
    plan.comm_elements["reduce_scatter"] = total * gas;
  }
  if (md != DSCORE_DTYPE_F32) m.master = bytes(owned, DSCORE_DTYPE_F32);
  for (const StateSlot& s : slots) m.optimizer += bytes(owned * s.elements_per_param, s.dtype);
  plan.comm_elements["allgather (step statistics)"] = 4 * world;
  return plan;
}

std::string format_plans(const std::vector<ZeroPlan>& plans) {
  if (plans.empty()) return "";
  const ZeroPlan& p0 = plans.front();
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "ZeRO stage %d, %d rank(s), %lld parameters (Psi), model %s, gradients %s\n",
                p0.stage, p0.world, static_cast<long long>(p0.numel),
                sdk::dtype_name(p0.model_dtype), sdk::dtype_name(p0.grad_dtype));
  out += line;
  auto row = [&](const char* name, auto get) {
    std::snprintf(line, sizeof line, "  %-24s", name);
    out += line;
    for (const ZeroPlan& p : plans) {
      std::snprintf(line, sizeof line, "%16s", get(p).c_str());
      out += line;
    }
    out += "\n";
  };
  row("", [](const ZeroPlan& p) { return "rank " + std::to_string(p.rank); });
  row("parameters", [](const ZeroPlan& p) { return format_bytes(p.memory.parameters); });
  row("gradients", [](const ZeroPlan& p) { return format_bytes(p.memory.gradients); });
  row("master weights (fp32)", [](const ZeroPlan& p) { return format_bytes(p.memory.master); });
  row("optimizer state", [](const ZeroPlan& p) { return format_bytes(p.memory.optimizer); });
  row("model states", [](const ZeroPlan& p) { return format_bytes(p.memory.model_states()); });
  row("buffers", [](const ZeroPlan& p) { return format_bytes(p.memory.buffers); });
  row("total", [](const ZeroPlan& p) { return format_bytes(p.memory.total()); });
  out += "  communication per optimizer step (elements of the full buffer of each collective):\n";
  for (const auto& [op, elements] : p0.comm_elements) {
    std::snprintf(
        line, sizeof line, "    %-28s %16lld  (%.3f Psi)\n", op.c_str(),
        static_cast<long long>(elements),
        p0.numel > 0 ? static_cast<double>(elements) / static_cast<double>(p0.numel) : 0.0);
    out += line;
  }
  return out;
}

}  // namespace dscore::zero
