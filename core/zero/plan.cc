#include "core/zero/plan.h"

#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/ordered_reduce.hpp>

#include <algorithm>
#include <cstdio>

#include "core/base/strings.h"
#include "core/comm/topology.h"
#include "core/zero/partition.h"

namespace dscore::zero {
namespace {

int64_t bytes(int64_t elements, dscore_dtype dtype) {
  return elements * static_cast<int64_t>(sdk::dtype_size(dtype));
}

constexpr int64_t kSwapAlign = kTileGranularity;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Moves the owned master and slots of `plan` from RAM to swap files.
// Staged (from a device whose memory the host does not address,
// core/owned_state/nvme_state.h): the master has a file for fp32 models too, and
// each tile buffer a gradient tile, beside two parameter staging tiles.
void plan_optimizer_swap(const config::OffloadConfig& offload, int64_t sub_group_size,
                         const std::vector<StateSlot>& slots, int64_t owned, bool staged,
                         ZeroPlan* plan) {
  OptimizerSwapPlan swap;
  swap.nvme_path = offload.nvme_path;
  swap.file_elements = round_up(owned, kSwapAlign);
  swap.tile_elements = nvme_tile_elements(sub_group_size, owned);
  swap.buffers = config::nvme_tile_buffers(offload);
  MemoryPlan& m = plan->memory;
  if (plan->model_dtype != DSCORE_DTYPE_F32 || staged) {
    swap.files.push_back({"fp32 master", bytes(swap.file_elements, DSCORE_DTYPE_F32)});
    swap.tile_bytes += bytes(swap.tile_elements, DSCORE_DTYPE_F32);
    m.disk_master = swap.files.back().bytes;
  }
  for (const StateSlot& s : slots) {
    swap.files.push_back({s.name, bytes(swap.file_elements * s.elements_per_param, s.dtype)});
    swap.tile_bytes += bytes(swap.tile_elements * s.elements_per_param, s.dtype);
    m.disk_optimizer += swap.files.back().bytes;
  }
  m.master = 0;
  m.optimizer = 0;
  m.offload_tiles = swap.tile_bytes * swap.buffers;
  if (staged) {
    m.offload_tiles += swap.buffers * bytes(swap.tile_elements, plan->grad_dtype) +
                       2 * bytes(swap.tile_elements, plan->model_dtype);
    plan->notes.push_back(
        "offload_optimizer.device \"nvme\" from the device: the update runs on the host; each "
        "tile buffer also holds the tile's gradients, copied from the device, and the new "
        "parameters go back through two staging tiles (\"offload tile buffers\")");
  }
  plan->swap = std::move(swap);
}

// ZeRO-Offload: the fp32 master in host memory (for fp32 models a copy of
// the parameters the model reads), a host copy of the owned gradients and,
// for 16-bit models, two staging tiles of parameters. With partial offload
// the first `kept` owned elements' master (16-bit models) and slots stay
// on the device, and only the rest has host copies.
void plan_host_offload(int64_t sub_group_size, int64_t owned, int64_t kept, double ratio,
                       const std::vector<StateSlot>& slots, ZeroPlan* plan) {
  const int64_t offloaded = owned - kept;
  const int64_t tile = offload_tile_elements(sub_group_size, offloaded);
  MemoryPlan& m = plan->memory;
  const bool staged_params = plan->model_dtype != DSCORE_DTYPE_F32;
  m.master = bytes(staged_params ? owned : offloaded, DSCORE_DTYPE_F32);
  m.offload_tiles = offloaded == 0 && kept > 0
                        ? 0
                        : bytes(std::max<int64_t>(offloaded, 1), plan->grad_dtype) +
                              (staged_params ? 2 * bytes(tile, plan->model_dtype) : 0);
  plan->notes.push_back(
      "offload_optimizer.device \"cpu\" (ZeRO-Offload): the fp32 master weights and the "
      "optimizer state in host memory, updated on the host in tiles of " +
      std::to_string(tile) +
      " elements; the gradients are copied to a host copy as they are reduced" +
      (staged_params ? ", the new 16-bit parameters back through two staging tiles" : "") +
      " (\"offload buffers\")");
  if (kept > 0) {
    plan->master_kept = staged_params ? bytes(kept, DSCORE_DTYPE_F32) : 0;
    for (const StateSlot& s : slots)
      plan->optimizer_kept += bytes(kept * s.elements_per_param, s.dtype);
    plan->notes.push_back("offload_optimizer.ratio " + format_double(ratio) +
                          " (partial offload): the master weights and optimizer state of the "
                          "first " +
                          std::to_string(kept) + " of the " + std::to_string(owned) +
                          " owned elements stay with the parameters and are updated there");
  }
}

constexpr const char* kNotCounted =
    "activations and the process's own memory are not counted (make_plan alone)";

std::string mib(int64_t bytes) { return format_bytes(static_cast<uint64_t>(bytes)); }

// The accumulator sdk::reduce_chunks keeps for a reduction of n elements
// (dscore/cpp/ordered_reduce.hpp): a tile of them, fp32 for 16- and 32-bit
// floats, fp64 otherwise.
int64_t reduce_accumulator_bytes(int64_t n, dscore_dtype dtype) {
  const bool fp32 =
      dtype == DSCORE_DTYPE_F32 || dtype == DSCORE_DTYPE_BF16 || dtype == DSCORE_DTYPE_F16;
  return std::min(n, sdk::detail::kReduceTile) * (fp32 ? 4 : 8);
}

// The mpi backend's staging for allreduces of buckets of `bucket` elements
// over a flat buffer of `padded` (plugins/comm/mpi/collectives.cc): every
// rank's chunk gathered and reduced; a bucket that is not a multiple of the
// world also takes a padded copy of itself and of its result. Its buffers
// grow to the largest use and stay, so the largest full bucket and the
// largest uneven one count (the last bucket may be shorter).
int64_t allreduce_scratch_bytes(int64_t bucket, int64_t padded, int world, dscore_dtype dtype) {
  const auto chunk = [world](int64_t n) { return (n + world - 1) / world; };
  int64_t padded_copies = 0;
  for (int64_t n : {bucket, padded % bucket})
    if (n > 0 && n % world != 0) padded_copies = std::max(padded_copies, 2 * chunk(n) * world);
  return bytes(chunk(bucket) * world + padded_copies, dtype) +
         reduce_accumulator_bytes(chunk(bucket), dtype);
}

// The most parameter elements one layer holds.
int64_t largest_layer_numel(const ParamLayout& layout) {
  int64_t largest = 0;
  for (size_t l = 0; l < layout.layer_count(); ++l) {
    int64_t layer = 0;
    for (size_t p = layout.layer_first(l); p < layout.layer_end(l); ++p)
      layer += layout.params()[p].numel;
    largest = std::max(largest, layer);
  }
  return largest;
}

// The most parameter elements stage 3 holds gathered at once, besides the
// persistent ones (core/zero/sharded_gathers.h): a layer used again within
// max_reuse_distance elements stays gathered, which with the defaults keeps
// every layer from its forward to its backward; otherwise the layer in use
// and one prefetched. Never more than max_live_parameters past the layer in
// use.
int64_t gathered_peak(const config::ZeroConfig& z, int64_t largest_layer, int64_t all_layers) {
  const int64_t kept = z.max_reuse_distance >= 2 * all_layers ? all_layers : 2 * largest_layer;
  return std::min({kept, all_layers, std::max<int64_t>(z.max_live_parameters, 0) + largest_layer});
}

}  // namespace

void add_process_memory(const ProcessMemory& process, ZeroPlan* plan) {
  MemoryPlan& m = plan->memory;
  auto& notes = plan->notes;
  notes.erase(std::remove(notes.begin(), notes.end(), kNotCounted), notes.end());
  m.activations = process.activations.value_or(0);
  plan->activations_counted = process.activations.has_value();
  m.process = 0;
  // What the process allocates in host memory, but the process itself.
  const int64_t allocated = plan->host_memory();
  const auto slack = static_cast<int64_t>(static_cast<double>(allocated) * process.allocator_slack);
  m.process = process.baseline + slack;
  if (!process.activations && plan->on_device) {
    notes.push_back("activations are not counted: " + process.model +
                    " declares none for its CUDA compute (activation_bytes in "
                    "sdk/include/dscore/model.h); leave room for them on the GPU");
  } else if (!process.activations) {
    notes.push_back("activations are not counted: " + process.model +
                    " does not declare them (activation_bytes in sdk/include/dscore/model.h); "
                    "leave room for them");
  } else if (process.other_setting && *process.other_setting != *process.activations) {
    notes.push_back(process.checkpointing
                        ? "activations with activation_checkpointing: " + mib(m.activations) +
                              " per micro-batch (" + mib(*process.other_setting) + " without)"
                        : "activations: " + mib(m.activations) + " per micro-batch (" +
                              mib(*process.other_setting) + " with activation_checkpointing)");
  }
  char slack_text[32];
  std::snprintf(slack_text, sizeof slack_text, "%.0f%%", 100.0 * process.allocator_slack);
  notes.push_back("process: " + mib(process.baseline) +
                  " measured (dscore, its libraries and plugins, MPI) plus the allocator's "
                  "slack, " +
                  slack_text + " of what the rank allocates (" + mib(slack) + ")");
}

int64_t ZeroPlan::device_memory() const {
  if (!on_device) return 0;
  const MemoryPlan& m = memory;
  return (params_on_host ? 0 : m.parameters) + m.gradients +
         (state_on_host ? master_kept + optimizer_kept : m.master + m.optimizer) + m.buffers +
         m.activations;
}

int64_t ZeroPlan::comm_total() const {
  int64_t total = 0;
  for (const auto& [op, elements] : comm_elements) total += elements;
  return total;
}

ZeroPlan make_plan(const config::TrainingConfig& config, const ParamLayout& layout,
                   const std::vector<StateSlot>& slots, int world, int rank,
                   std::optional<bool> device_memory_is_host) {
  return make_plan(config, config::make_placement(config, device_memory_is_host), layout, slots,
                   world, rank);
}

ZeroPlan make_expert_parallel_plan(const config::TrainingConfig& config,
                                   const config::Placement& placement, const ParamLayout& layout,
                                   const std::vector<StateSlot>& slots, int world, int rank,
                                   int expert_world, int expert_rank) {
  std::vector<bool> expert(layout.params().size()), dense(layout.params().size());
  for (size_t i = 0; i < expert.size(); ++i) {
    expert[i] = (layout.params()[i].flags & DSCORE_PARAM_EXPERT) != 0;
    dense[i] = !expert[i];
  }
  std::vector<size_t> params, layers;
  const ParamLayout experts = ParamLayout::subset(layout, expert, &params, &layers);
  if (experts.params().empty()) return make_plan(config, placement, layout, slots, world, rank);
  ZeroPlan plan = make_plan(config, placement, ParamLayout::subset(layout, dense, &params, &layers),
                            slots, world, rank);
  const ZeroPlan e = make_plan(config, placement, experts, slots, expert_world, expert_rank);
  MemoryPlan& m = plan.memory;
  for (auto [mine, theirs] : {std::pair{&m.parameters, e.memory.parameters},
                              {&m.gradients, e.memory.gradients},
                              {&m.master, e.memory.master},
                              {&m.optimizer, e.memory.optimizer},
                              {&m.buffers, e.memory.buffers},
                              {&m.offload_tiles, e.memory.offload_tiles},
                              {&m.disk_master, e.memory.disk_master},
                              {&m.disk_optimizer, e.memory.disk_optimizer},
                              {&m.disk_parameters, e.memory.disk_parameters},
                              {&m.host_staging, e.memory.host_staging}})
    *mine += theirs;
  m.comm_scratch = std::max(m.comm_scratch, e.memory.comm_scratch);
  plan.numel += e.numel;
  for (const auto& [op, elements] : e.comm_elements) plan.comm_elements[op] += elements;
  plan.notes.push_back("expert parallelism: this rank's experts' " + std::to_string(e.numel) +
                       " parameters are partitioned over their " + std::to_string(expert_world) +
                       " expert-data-parallel rank(s), the other " +
                       std::to_string(plan.numel - e.numel) + " over the " + std::to_string(world) +
                       " data-parallel rank(s)");
  return plan;
}

ZeroPlan make_plan(const config::TrainingConfig& config, const config::Placement& placement,
                   const ParamLayout& layout, const std::vector<StateSlot>& slots, int world,
                   int rank) {
  ZeroPlan plan;
  plan.stage = placement.stage;
  plan.world = world;
  plan.zero_ranks = world;
  plan.rank = rank;
  // Every rank on the data axis until pipeline, tensor, sequence or expert
  // parallelism come (the engine's grid).
  plan.grid = comm::ParallelGrid::data_parallel(world).describe();
  plan.placement = config::describe(placement);
  plan.numel = layout.total_numel();
  plan.model_dtype = placement.model_dtype;
  plan.grad_dtype = placement.grad_dtype;
  const dscore_dtype md = plan.model_dtype, gd = plan.grad_dtype;
  const int64_t gas = config.batch.gradient_accumulation_steps;
  plan.gradient_accumulation_steps = gas;
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
      // The IPG buckets (core/zero/ipg_buckets.h), and one layer's
      // gradients more: the copy of a bucket that holds a layer the model
      // lends again later (a tied embedding), or a layer larger than a
      // bucket, each reduced from memory of its own.
      const int64_t bucket =
          std::clamp<int64_t>(gradient_flush_elements(config.zero), 1, flat.padded_numel);
      const int count = config.zero.overlap_comm ? 2 : 1;
      m.buffers = bytes(bucket, gd) * count + bytes(largest_layer_numel(layout), gd);
    }
    if (world > 1) {  // the largest reduction's staging in the mpi backend
      const int64_t n =
          std::clamp<int64_t>(gradient_flush_elements(config.zero), 1, flat.padded_numel);
      if (plan.stage == 0) {  // allreduces of the buckets
        m.comm_scratch = allreduce_scratch_bytes(n, flat.padded_numel, world, gd);
      } else {  // a reduce of a bucket's piece one rank owns: gathered on that rank
        const int64_t piece = std::min(n, flat.partition_size);
        m.comm_scratch = bytes(piece, gd) * world + reduce_accumulator_bytes(piece, gd);
      }
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
    // Layers' full gradients wait until gradient_flush_elements are
    // pending (plus the layer that crossed it, at most all of them), then
    // are reduce-scattered together: their rank-ordered copy and this
    // rank's reduced part (core/zero/sharded_reduce_scatter.h).
    const int64_t held = std::min(total, gradient_flush_elements(config.zero) + largest_layer);
    const int64_t part = (held + world - 1) / world;
    m.buffers =
        bytes(gathered_peak(config.zero, largest_layer, gathered_per_pass) + persistent, md) +
        bytes(2 * held + part, gd);
    // ZeRO++ hpZ: this rank's piece of every gathered parameter.
    const int64_t hpz = config.zero.hpz_partition_size;
    if (hpz > 1 && world % hpz == 0) m.buffers += bytes(gathered_per_pass / hpz, md);
    if (world > 1)  // reduce_scatter's gathered copy and its accumulator for one rank's part
      m.comm_scratch = bytes(held, gd) + reduce_accumulator_bytes(part, gd);
    // Forward and backward each gather once per micro-step (when layers are
    // released in between); gradients are reduce-scattered once.
    plan.comm_elements["allgather"] = 2 * gathered_per_pass * gas + persistent;
    plan.comm_elements["reduce_scatter"] = total * gas;
    plan.gathered_per_pass = gathered_per_pass;
    plan.persistent_elements = persistent;
    plan.padded_elements = total;
  }
  if (md != DSCORE_DTYPE_F32 && !placement.low_precision_master())
    m.master = bytes(owned, DSCORE_DTYPE_F32);
  for (const StateSlot& s : slots) {
    // bf16_optimizer_states stores the fp32 slots narrower.
    const dscore_dtype stored = s.dtype == DSCORE_DTYPE_F32 ? placement.state_dtype : s.dtype;
    m.optimizer += bytes(owned * s.elements_per_param, stored);
    if (placement.low_precision_master() && stored != s.dtype)
      m.buffers += bytes(low_precision_tile_elements(owned) * s.elements_per_param, s.dtype);
  }
  if (placement.low_precision_master())  // the master's fp32 tile
    m.buffers += bytes(low_precision_tile_elements(owned), DSCORE_DTYPE_F32);
  // Offload from device memory the host does not address moves through
  // host buffers (core/owned_state/nvme_state.h, core/zero/sharded_storage.h).
  const bool staged = !placement.device_memory_is_host;
  plan.on_device = staged;
  if (config.comm.backend == "nccl") m.comm_scratch = 0;  // its buffers are on the GPU, uncounted
  plan.optimizer_device = config::offload_device_name(placement.optimizer_offload.device);
  if (placement.optimizer_on_nvme())
    plan_optimizer_swap(placement.optimizer_offload, config.zero.sub_group_size, slots, owned,
                        staged, &plan);
  if (placement.host_offload()) {
    plan_host_offload(config.zero.sub_group_size, owned,
                      kept_on_device_elements(placement, config.zero.sub_group_size, owned),
                      placement.offloaded_ratio, slots, &plan);
    plan.state_on_host = staged;
  } else if (const std::string why = config::optimizer_offload_kept_reason(placement); !why.empty())
    plan.notes.push_back(why);
  const config::OffloadConfig& p = placement.param_offload;
  if (placement.params_on_nvme()) {
    // param_swap.h: the shards in a file, the first max_in_cpu elements in RAM.
    const int64_t resident = param_resident_elements(owned, p.max_in_cpu);
    m.parameters = bytes(resident, md);
    m.disk_parameters = bytes(round_up(std::max<int64_t>(owned, 1), kTileGranularity), md);
    m.host_staging = param_read_staging_bytes(owned, resident, md);
    if (staged && owned > resident)
      m.host_staging +=
          bytes(param_swap_ring_elements(p.buffer_count, p.buffer_size, owned - resident), md) +
          kParamSwapRingSlack;
    plan.params_on_host = staged;
    plan.param_nvme_path = p.nvme_path;
  } else if (placement.parameters == config::Home::kHost) {
    plan.params_on_host = staged;
    plan.notes.push_back(staged ? "offload_param.device \"cpu\": the parameter shards in pinned "
                                  "host memory, copied to the device by each gather"
                                : "offload_param.device \"cpu\": the parameters are already in "
                                  "host memory on the CPU; nothing moves");
  }
  plan.notes.push_back(kNotCounted);
  plan.comm_elements["allgather (step statistics)"] = 4 * world;
  return plan;
}

int64_t offload_tile_elements(int64_t sub_group_size, int64_t owned) {
  return std::min(nvme_tile_elements(sub_group_size, owned), kHostOffloadTileCap);
}

int64_t kept_on_device_elements(const config::Placement& placement, int64_t sub_group_size,
                                int64_t owned) {
  if (!placement.partial_offload() || owned <= 0) return 0;
  const int64_t group = nvme_tile_elements(sub_group_size, owned);
  const int64_t groups = (owned + group - 1) / group;
  const auto kept =
      static_cast<int64_t>((1.0 - placement.offloaded_ratio) * static_cast<double>(groups));
  return std::min(kept * group, owned);
}

int64_t param_resident_elements(int64_t local, int64_t max_in_cpu) {
  if (max_in_cpu >= local) return local;
  return max_in_cpu / kTileGranularity * kTileGranularity;
}

int64_t param_read_staging_bytes(int64_t local, int64_t resident, dscore_dtype dtype) {
  const int64_t on_disk = round_up(std::max<int64_t>(local - resident, 0), kTileGranularity) *
                          static_cast<int64_t>(sdk::dtype_size(dtype));
  return 2 * std::min(on_disk, kParamReadChunkBytes);
}

int64_t gradient_flush_elements(const config::ZeroConfig& zero) {
  return std::max<int64_t>(std::min(zero.reduce_bucket_size, zero.reduce_flush_elements), 1);
}

int64_t param_swap_ring_elements(int64_t buffer_count, int64_t buffer_size, int64_t local) {
  const int64_t limit = std::max<int64_t>(local, 1);
  const int64_t count = std::max<int64_t>(buffer_count, 1),
                size = std::max<int64_t>(buffer_size, 1);
  const int64_t buffers = size > limit / count ? limit : count * size;
  return round_up(buffers, kTileGranularity) + kParamSwapSpanEnds;
}

int64_t nvme_tile_elements(int64_t sub_group_size, int64_t owned) {
  const int64_t wanted = std::max(sub_group_size / kTileGranularity, int64_t{1}) * kTileGranularity;
  return std::min(wanted, round_up(std::max(owned, int64_t{1}), kTileGranularity));
}

}  // namespace dscore::zero
