// The memory and communication plan of a run, per rank, computed from the
// config, the model's parameter layout and the optimizer's state slots
// before anything is allocated (`dscore plan`). The engine allocates exactly
// these buffers, so its counted allocations can be printed beside the plan.
// Memory follows the ZeRO paper's model states: with 16-bit parameters and
// Adam (K = 12: fp32 master + m + v), stage 0 holds (2+2+K)Psi, stage 1
// 2Psi + 2Psi + K Psi/N, stage 2 2Psi + (2+K)Psi/N, stage 3 (2+2+K)Psi/N,
// plus buffers; in fp32, 4-byte parameters and gradients and no master copy.
// With offload_optimizer.device "nvme" the owned master weights and state
// slots live in swap files (disk) and RAM holds tile buffers instead; with
// "cpu" (ZeRO-Offload) they live in host memory, an fp32 model's master
// apart from its parameters, beside a host copy of the owned gradients.
// On a GPU (ZeroPlan::on_device) the model states, buffers and activations
// are in the GPU's memory, except what is offloaded; host memory holds the
// offloaded state, the staging and the process (device_memory(),
// host_memory()).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/config/config.h"
#include "core/config/placement.h"
#include "core/config/training_config.h"
#include "core/zero/param_layout.h"

namespace dscore::zero {

struct StateSlot {
  std::string name;
  dscore_dtype dtype = DSCORE_DTYPE_F32;
  uint32_t elements_per_param = 1;
};

struct MemoryPlan {
  int64_t parameters = 0;      // model-dtype parameters held (full, or shards in stage 3)
  int64_t gradients = 0;       // full gradients (stages 0/1) or the partition (2/3)
  int64_t master = 0;          // fp32 master weights of 16-bit models
  int64_t optimizer = 0;       // declared state slots
  int64_t buffers = 0;         // buckets, gathered layers, persistent parameters
  int64_t offload_tiles = 0;   // NVMe tile buffers, or ZeRO-Offload's host gradients and staging
  int64_t disk_master = 0;     // swap file of the fp32 master weights (NVMe)
  int64_t disk_optimizer = 0;  // swap files of the state slots (NVMe)
  // Staging of the mpi comm backend (plugins/comm/mpi/collectives.cc) for
  // the largest gradient reduction, kept for the run: a reduce gathers every
  // rank's copy at the root (world x n), an allreduce holds 3 x n.
  int64_t comm_scratch = 0;
  int64_t activations = 0;  // the model's, for one micro-batch (add_process_memory)
  int64_t process = 0;      // the process itself and the allocator's slack (add_process_memory)
  // offload_param nvme's reads: the read staging (param_swap.h), and on a
  // GPU the staging ring into device memory.
  int64_t host_staging = 0;
  // Model states held in memory, and everything in memory at the peak
  // (host and device).
  int64_t model_states() const { return parameters + gradients + master + optimizer; }
  int64_t total() const {
    return model_states() + buffers + offload_tiles + comm_scratch + activations + process +
           host_staging;
  }
  int64_t disk_parameters = 0;  // stage 3 shards on NVMe (offload_param)
  int64_t disk() const { return disk_master + disk_optimizer + disk_parameters; }
};

// What a rank holds beyond the model states and buffers make_plan counts:
// the model's activations (declared by the model, model.h activation_bytes)
// and the process's own memory (measured; core/app/planner.h).
struct ProcessMemory {
  std::string model;                     // the model's display name, for the note
  std::optional<int64_t> activations;    // one micro-batch as configured; nullopt: unknown
  std::optional<int64_t> other_setting;  // the same with activation checkpointing flipped
  bool checkpointing = false;            // the config's activation_checkpointing is on
  int64_t baseline = 0;                  // RSS of the process before it allocates for training
  // The allocator's slack on the bytes the rank allocates (model states,
  // buffers, activations): a fraction of them.
  double allocator_slack = 0;
};

// How offload_optimizer with device "nvme" processes the owned partition:
// one swap file per state under nvme_path/<job>/rank<R>/ (the fp32 master
// for 16-bit models, then one per slot), each file_elements x
// elements_per_param elements, streamed through `buffers` tile buffers of
// tile_elements parameters each.
struct OptimizerSwapPlan {
  std::string nvme_path;
  int64_t file_elements = 0;  // round_up(owned, kTileGranularity)
  int64_t tile_elements = 0;  // nvme_tile_elements()
  int64_t buffers = 0;        // 1 + pipeline_read + pipeline_write
  int64_t tile_bytes = 0;     // one tile buffer: master (16-bit models) and every slot
  struct File {
    std::string state;  // "fp32 master" or the slot's name
    int64_t bytes = 0;
  };
  std::vector<File> files;
};

// A pipeline stage's part of a plan (`dscore plan` with "pipeline",
// docs/pipeline.md): which layers, and what the 1F1B schedule keeps and
// moves.
struct PipeStagePlan {
  int stage = 0;
  int stages = 1;
  int data_parallel = 1;
  int stage_ranks = 1;     // the stage's ranks (data x sequence x tensor parallel), consecutive
  int virtual_stages = 1;  // chunks a stage (the interleaved schedule), else 1
  std::string layers;      // the model's layers its chunks hold: "0-1, 4-5"
  size_t tied_copies = 0;  // layers held as copies of another stage's
  int in_flight = 1;       // micro-batches between their forward and backward, at most
  int64_t boundary_in = 0, boundary_out = 0;  // bytes received, sent per micro-batch
  int micro_batches = 1;
  double bubble = 0;  // (stages - 1) / (virtual_stages * micro_batches + stages - 1)
};

// The model's own collectives per optimizer step (model.h
// collective_bytes, over the step's micro-batches): its tensor-parallel
// allreduces, sequence-parallel all-to-alls and expert-parallel token
// exchanges, each call counted at its input buffer's bytes.
struct ModelTraffic {
  int64_t tensor_parallel_calls = 0, tensor_parallel_bytes = 0;
  int64_t sequence_parallel_calls = 0, sequence_parallel_bytes = 0;
  int64_t expert_parallel_calls = 0, expert_parallel_bytes = 0;
};

struct ZeroPlan {
  int stage = 0;
  int world = 1;
  int rank = 0;
  int zero_ranks = 1;  // the ranks ZeRO partitions this rank's state over (its ZeRO group)
  // The job's ranks as parallel axes (comm/topology.h), and where the
  // state lives (config/placement.h describe()), for the report.
  std::string grid;
  std::string placement;
  int64_t numel = 0;  // Psi
  // Tensor parallelism: the ranks each layer is split over, and the whole
  // model's elements (numel is this rank's part).
  int tensor_parallel = 1;
  int64_t whole_numel = 0;
  dscore_dtype model_dtype = DSCORE_DTYPE_F32;
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;
  // Stage 3's traffic in parts (scale_plan.h): the padded elements gathered
  // per pass (non-persistent), the persistent ones, all of them, and the
  // micro-steps per step.
  int64_t gathered_per_pass = 0, persistent_elements = 0, padded_elements = 0;
  int64_t gradient_accumulation_steps = 1;
  MemoryPlan memory;
  std::string optimizer_device = "none";  // offload_optimizer.device: none, cpu or nvme
  std::optional<OptimizerSwapPlan> swap;  // with device "nvme"
  std::string param_nvme_path;            // offload_param nvme (stage 3): where the shards go
  // The folder the swap files need space at (the optimizer's, else the
  // parameters'); empty when nothing goes to disk.
  std::string disk_path() const { return swap ? swap->nvme_path : param_nvme_path; }
  bool activations_counted = false;  // add_process_memory had the model's declaration
  // The engine computes on a device whose memory the host does not address
  // (a GPU): see device_memory(). (The nccl backend keeps its buffers there,
  // uncounted: with it comm_scratch is 0.)
  bool on_device = false;
  bool state_on_host = false;  // on a GPU: ZeRO-Offload's master and optimizer state
  // Of memory.master and memory.optimizer, the bytes partial offload keeps
  // with the parameters (on a GPU: in its memory, with state_on_host).
  int64_t master_kept = 0;
  int64_t optimizer_kept = 0;
  bool params_on_host = false;  // on a GPU: offload_param's shards (stage 3)
  // On a GPU, the part of memory.total() in its memory: the parameters,
  // gradients, master and optimizer state that are not on the host, the
  // buffers and the activations; 0 on a CPU.
  int64_t device_memory() const;
  // The rest: all of total() on a CPU.
  int64_t host_memory() const { return memory.total() - device_memory(); }
  std::vector<std::string> notes;     // printed under the table
  std::optional<PipeStagePlan> pipe;  // under a pipeline: this rank's stage
  // Elements moved per optimizer step, by collective (the communicator's
  // counting: the full buffer of each call).
  std::map<std::string, int64_t> comm_elements;
  // Where the model is split and declares them: its own collectives.
  std::optional<ModelTraffic> model_traffic;
  int64_t comm_total() const;
};

// The plan of `placement` (config/placement.h) with the config's bucket,
// prefetch and sub-group sizes.
ZeroPlan make_plan(const config::TrainingConfig& config, const config::Placement& placement,
                   const ParamLayout& layout, const std::vector<StateSlot>& slots, int world,
                   int rank);
// Under expert parallelism (expert_split_zero.h): the plan of `layout`'s
// dense parameters over ZeRO's `world` ranks plus its experts'
// (DSCORE_PARAM_EXPERT) over their `expert_world` expert-data-parallel
// ranks, added up; a layout without experts is make_plan's.
ZeroPlan make_expert_parallel_plan(const config::TrainingConfig& config,
                                   const config::Placement& placement, const ParamLayout& layout,
                                   const std::vector<StateSlot>& slots, int world, int rank,
                                   int expert_world, int expert_rank);
// The same with the config's placement. `device_memory_is_host`: whether
// the host addresses the memory of the device the engine computes on
// (device.h memory_is_host()); unset: on a CPU unless "device" is "cuda".
ZeroPlan make_plan(const config::TrainingConfig& config, const ParamLayout& layout,
                   const std::vector<StateSlot>& slots, int world, int rank,
                   std::optional<bool> device_memory_is_host = std::nullopt);

// Adds the activations and the process to `plan`'s memory (and its peak,
// total()), with a note saying what was counted and what was not.
void add_process_memory(const ProcessMemory& process, ZeroPlan* plan);

// Stage 3 reduce-scatters the layers' gradients once this many elements
// are pending: reduce_bucket_size, or ZeroConfig::reduce_flush_elements
// (2^24) when that is smaller, so a model under the bucket size (5e8 by
// default) still reduces beside its backward instead of all at its end,
// and a reduction's buffers stay small (core/zero/sharded_reduce_scatter.h).
int64_t gradient_flush_elements(const config::ZeroConfig& zero);

// Swap files and tiles of NVMe optimizer offload are whole multiples of
// this many elements (a 4 KiB-aligned transfer at any dtype size).
inline constexpr int64_t kTileGranularity = 4096;
// With 16-bit masters (core/owned_state/low_precision_master_state.h) the
// optimizer works on fp32 tiles of this many elements (4 MiB each): one for
// the master, one per slot stored narrower than declared.
inline int64_t low_precision_tile_elements(int64_t owned) {
  constexpr int64_t kTile = int64_t{1} << 20;
  return owned < 1 ? 1 : (owned < kTile ? owned : kTile);
}
// Stage 3 with its parameters on NVMe, from device memory the host does
// not address: swapped shards come in through a pinned staging ring
// (core/device/staging_ring.h), read there straight from the file in
// aligned spans: offload_param's buffer_count x buffer_size (DeepSpeed's
// swap buffers), at most the rank's `local` elements on disk (past
// max_in_cpu), rounded up to kTileGranularity, plus kParamSwapSpanEnds
// for a span's unaligned ends (core/zero/swapped_gathers.h). The resident
// ones are pinned and need none. Allocated with kParamSwapRingSlack bytes
// more, to align its start for the disk.
int64_t param_swap_ring_elements(int64_t buffer_count, int64_t buffer_size, int64_t local);
// A read span is at most this many elements longer than what it reads.
inline constexpr int64_t kParamSwapSpanEnds = 2 * kTileGranularity;
inline constexpr int64_t kParamSwapRingSlack = 4096;
// Elements per tile: sub_group_size rounded down to the granularity (at
// least one granule), at most the owned space rounded up.
int64_t nvme_tile_elements(int64_t sub_group_size, int64_t owned);

// ZeRO-Offload (offload_optimizer.device "cpu", core/engine/
// host_offload_state.h) updates the owned space on the host in tiles of
// nvme_tile_elements, at most kHostOffloadTileCap, with a host copy of the
// owned gradients and (16-bit models) two staging tiles of parameters.
inline constexpr int64_t kHostOffloadTileCap = int64_t{1} << 22;
int64_t offload_tile_elements(int64_t sub_group_size, int64_t owned);
// Partial offload (Placement::partial_offload, DeepSpeed's
// ZeRO-Offload++): the owned elements [0, n) whose master and optimizer
// state stay with the parameters, updated there; the rest is offloaded. As
// DeepSpeed: of the G sub-groups of sub_group_size elements (here
// nvme_tile_elements), the first floor((1 - ratio) * G). 0 without partial
// offload.
int64_t kept_on_device_elements(const config::Placement& placement, int64_t sub_group_size,
                                int64_t owned);

// offload_param nvme (stage 3): of a rank's `local` shard elements, the
// first ones kept in memory: max_in_cpu rounded down to whole granules, or
// all of them when max_in_cpu covers them (core/zero/param_swap.h).
int64_t param_resident_elements(int64_t local, int64_t max_in_cpu);
// Reads of the part on disk go through two staging chunks of at most this
// many bytes, each at most the part on disk rounded up to the granularity.
inline constexpr int64_t kParamReadChunkBytes = int64_t{8} << 20;
int64_t param_read_staging_bytes(int64_t local, int64_t resident, dscore_dtype dtype);

// What one node offers the ranks it runs: read from the machine
// (read_node_capacity in core/app/planner.h) or given by tests. An
// unknown capacity is not checked.
struct NodeCapacity {
  std::optional<int64_t> ram_available;   // bytes (MemAvailable)
  std::optional<int64_t> disk_available;  // bytes free at the plan's nvme_path
  // Bytes free on the rank's GPU (cudaMemGetInfo), for a plan on_device;
  // each rank has a GPU of its own.
  std::optional<int64_t> device_available;
  int local_ranks = 1;  // ranks sharing this RAM and disk
};

// OK when `local_ranks` ranks with this rank's plan fit in the node's RAM,
// its GPU's memory and, with NVMe offload, on its disk; else
// RESOURCE_EXHAUSTED naming the bytes needed and available (per rank and
// for the node) and the settings that lower them. The RAM counted is the
// plan's peak in host memory, host_memory(): with add_process_memory, the
// process included, and on a CPU the activations. On a GPU its memory is
// checked for device_memory(): the model states and buffers there, and the
// activations the model declares for its CUDA compute.
Status check_fits(const ZeroPlan& plan, const NodeCapacity& node);

// A table: one column per rank (or plan vs measured), bytes in KiB/MiB/GiB.
std::string format_plans(const std::vector<ZeroPlan>& plans);

}  // namespace dscore::zero
