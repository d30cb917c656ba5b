#include "core/engine/job_fit.h"

#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dscore {
namespace {

std::optional<int64_t> mem_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> disk_free(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);
  if (ec) return std::nullopt;
  while (!fs::exists(at, ec) && at.has_parent_path() && at != at.parent_path())
    at = at.parent_path();
  struct statvfs st {};
  if (statvfs(at.c_str(), &st) != 0) return std::nullopt;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

std::optional<int64_t> status_kib(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (fields >> name >> kib && name == key) return kib * 1024;
  }
  return std::nullopt;
}

// The process's memory beyond what it holds when the plan is made (its
// VmRSS then, with dscore, its libraries and the plugins loaded), measured on
// the reference machine (2 cores; Debian 12: glibc 2.36, TBB 2021.8, OpenBLAS
// 0.3.21 pthread, Open MPI 4.1.4) from the peak RSS (VmHWM) that `dscore
// run` reports with memory_breakdown, for the quickstart and the bench GPT
// (bench/gpt_train.cc) at 1 and 2 ranks; tests/core/cli/memory_plan_test.cc
// holds the plan within 10% of it.
// - An MPI rank holds about 10 MiB more than a plain process after
//   MPI_Init (Open MPI's shared-memory transport, progress thread and
//   buffers: 163 -> 173 MiB). `dscore plan` does not start MPI, so it adds
//   this for world > 1; a rank measures it itself (in_job).
constexpr int64_t kMpiRankBytes = int64_t{10} << 20;
// - What a training step touches that the loaded process has not yet: the
//   BLAS and TBB threads' working memory and stacks, and the kernels' code
//   pages. About 3 MiB on the quickstart (peak RSS 37.1-37.5 MiB against a
//   plan of 34.2-34.6 MiB without it, once the gpt plugin stopped mapping
//   cuBLAS for CPU runs, which had hidden it in a 165 MiB baseline).
constexpr int64_t kFirstStepBytes = int64_t{3} << 20;
// - glibc malloc's slack over what the rank allocates (page rounding of large
//   mmap'd blocks, freed kernel scratch kept in per-thread arenas) and the
//   compute threads' stacks: under 1% of the bytes allocated in every run
//   above, so 1%.
constexpr double kAllocatorSlack = 0.01;

}  // namespace

std::optional<int64_t> resident_bytes() { return status_kib("VmRSS:"); }
std::optional<int64_t> peak_resident_bytes() { return status_kib("VmHWM:"); }

bool checkpoints_activations(const config::TrainingConfig& config) {
  if (config.activation_checkpointing.present) return true;
  // plugin_setup.cc turns the model's on for it too.
  if (config::pipeline_stages_of(config) > 1 && config.pipeline.activation_checkpoint_interval > 0)
    return true;
  if (!config.model) return false;
  const json::Value* own = config.model->params.find("checkpoint_activations");
  return own != nullptr && own->is_bool() && own->as_bool();
}

zero::ProcessMemory measure_process_memory(const config::TrainingConfig& config,
                                           const std::string& model_name,
                                           const ActivationQuery& activations, int world_size,
                                           bool in_job) {
  zero::ProcessMemory process;
  process.model = model_name;
  process.checkpointing = checkpoints_activations(config);
  auto as_int = [](const Result<uint64_t>& r) -> std::optional<int64_t> {
    if (!r.ok()) return std::nullopt;
    return static_cast<int64_t>(*r);
  };
  process.activations = as_int(activations(process.checkpointing));
  if (process.activations) process.other_setting = as_int(activations(!process.checkpointing));
  process.baseline = resident_bytes().value_or(0) + kFirstStepBytes;
  if (world_size > 1 && !in_job) process.baseline += kMpiRankBytes;
  process.allocator_slack = kAllocatorSlack;
  return process;
}

std::vector<zero::StateSlot> state_slots_of(const plugin_host::OptimizerInstance& optimizer) {
  std::vector<zero::StateSlot> slots;
  for (const auto& s : optimizer.slots()) slots.push_back({s.name, s.dtype, s.elements_per_param});
  return slots;
}

zero::NodeCapacity read_node_capacity(const zero::ZeroPlan& plan, int local_ranks) {
  zero::NodeCapacity node;
  node.local_ranks = local_ranks;
  node.ram_available = mem_available();
  if (!plan.disk_path().empty()) node.disk_available = disk_free(plan.disk_path());
  return node;
}

StageFit stage_fit(const comm::Topology& topology, int64_t executor_bytes) {
  StageFit fit{topology.group_size(comm::groups::kZero),
               topology.rank_in_group(comm::groups::kZero), executor_bytes, 0, 0};
  if (topology.grid().size(comm::Axis::kExpert) > 1) {
    fit.expert_data_parallel = topology.group_size(comm::groups::kExpertData);
    fit.expert_data_parallel_rank = topology.rank_in_group(comm::groups::kExpertData);
  }
  return fit;
}

Status check_job_fits(const config::TrainingConfig& config, const ParamLayout& layout,
                      const std::vector<zero::StateSlot>& slots, const comm::JobEnv& job,
                      const std::optional<zero::ProcessMemory>& process,
                      const device::Device* device, const std::optional<StageFit>& stage) {
  std::optional<bool> memory_is_host;
  if (device != nullptr) memory_is_host = device->memory_is_host();
  const config::Placement placement = config::make_placement(config, memory_is_host);
  if (auto errors = config::placement_errors(placement); !errors.empty())
    return invalid_argument(errors.front().path + ": " + errors.front().message);
  const int world = stage ? stage->data_parallel : job.world_size;
  const int rank = stage ? stage->data_parallel_rank : job.rank;
  zero::ZeroPlan plan = stage && stage->expert_data_parallel > 0
                            ? zero::make_expert_parallel_plan(
                                  config, placement, layout, slots, world, rank,
                                  stage->expert_data_parallel, stage->expert_data_parallel_rank)
                            : zero::make_plan(config, placement, layout, slots, world, rank);
  if (stage) plan.memory.buffers += stage->executor_bytes;
  if (process) zero::add_process_memory(*process, &plan);
  zero::NodeCapacity node = read_node_capacity(plan, job.ranks_on_node());
  if (device != nullptr) node.device_available = device->available_bytes();
  return zero::check_fits(plan, node);
}

}  // namespace dscore
