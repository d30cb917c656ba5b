// What the memory plan tells people (plan.h): whether a rank's plan fits
// the node (check_fits: RAM, disk and, on a GPU, its memory, with the
// settings that lower what is short) and the table `dscore plan` prints.
#include "core/zero/plan.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/strings.h"

namespace dscore::zero {
namespace {

std::string per_rank_and_node(int64_t per_rank, int local_ranks) {
  std::string s = format_bytes(static_cast<uint64_t>(per_rank)) + " per rank";
  if (local_ranks > 1)
    s += " (" + format_bytes(static_cast<uint64_t>(per_rank * local_ranks)) + " for the " +
         std::to_string(local_ranks) + " ranks on this node)";
  return s;
}

std::string available_text(int64_t available, int local_ranks) {
  std::string s = format_bytes(static_cast<uint64_t>(available));
  if (local_ranks > 1)
    s += " (" + format_bytes(static_cast<uint64_t>(available / local_ranks)) + " per rank)";
  return s;
}

// On a GPU: its memory holds more than is free there.
std::string device_problem(const ZeroPlan& plan, int64_t needed, int64_t available) {
  const bool activations = plan.activations_counted && plan.memory.activations > 0;
  std::string fix;
  if (activations)
    fix +=
        "lower train_micro_batch_size_per_gpu or turn on activation_checkpointing "
        "(activations take " +
        format_bytes(static_cast<uint64_t>(plan.memory.activations)) + " per rank), ";
  if (!plan.state_on_host && !plan.swap)
    fix +=
        "offload the optimizer state (zero_optimization.offload_optimizer.device \"cpu\", or "
        "\"nvme\" with an nvme_path), ";
  else if (plan.master_kept + plan.optimizer_kept > 0)
    fix +=
        "offload more of the optimizer state (raise zero_optimization.offload_optimizer.ratio: "
        "the part kept takes " +
        format_bytes(static_cast<uint64_t>(plan.master_kept + plan.optimizer_kept)) +
        " per rank), ";
  if (plan.stage < 3)
    fix +=
        "use a higher ZeRO stage (zero_optimization.stage is " + std::to_string(plan.stage) + "), ";
  else if (!plan.params_on_host)
    fix +=
        "offload the parameters (zero_optimization.offload_param.device \"cpu\" or "
        "\"nvme\"), ";
  fix += plan.stage > 0 ? "or run more ranks (each holds only its partition)"
                        : "or run on a GPU with more memory";
  return std::string("GPU memory: the model states, buffers ") +
         (activations ? "and activations" : "(activations not counted)") + " there need " +
         format_bytes(static_cast<uint64_t>(needed)) + " per rank but the rank's GPU has " +
         format_bytes(static_cast<uint64_t>(available)) + " free (cudaMemGetInfo); to fit, " + fix;
}

// On a GPU: host memory holds the offloaded state, the staging and the
// process, more than this node has for its ranks.
std::string host_problem_on_device(const ZeroPlan& plan, int64_t ram, int local,
                                   int64_t available) {
  std::string fix;
  if (plan.state_on_host)
    fix +=
        "move the optimizer state to disk (zero_optimization.offload_optimizer.device "
        "\"nvme\") or keep it on the GPU (\"none\"), ";
  else if (plan.swap && plan.memory.offload_tiles > 0)
    fix += "use a smaller zero_optimization.sub_group_size (the tile buffers take " +
           format_bytes(static_cast<uint64_t>(plan.memory.offload_tiles)) +
           " per rank) or turn off pipeline_read/pipeline_write, ";
  if (plan.params_on_host)
    fix += "keep the parameters on the GPU (zero_optimization.offload_param.device \"none\"), ";
  fix += "or run fewer ranks on this node";
  return "RAM: what the ranks keep in host memory (offloaded state, staging and the process) "
         "needs " +
         per_rank_and_node(ram, local) + " but this node has " + available_text(available, local) +
         " available (MemAvailable); to fit, " + fix;
}

}  // namespace

Status check_fits(const ZeroPlan& plan, const NodeCapacity& node) {
  const int local = std::max(node.local_ranks, 1);
  std::vector<std::string> problems;
  if (plan.on_device && node.device_available) {
    const int64_t needed = plan.device_memory();
    if (needed > *node.device_available)
      problems.push_back(device_problem(plan, needed, *node.device_available));
  }
  const int64_t ram = plan.host_memory();
  if (plan.on_device && node.ram_available && ram * local > *node.ram_available) {
    problems.push_back(host_problem_on_device(plan, ram, local, *node.ram_available));
  } else if (node.ram_available && ram * local > *node.ram_available) {
    std::string fix;
    if (!plan.swap)
      fix +=
          "move the optimizer state to disk (zero_optimization.offload_optimizer.device "
          "\"nvme\" with an nvme_path), ";
    else if (plan.memory.offload_tiles > 0)
      fix += "use a smaller zero_optimization.sub_group_size (the tile buffers take " +
             format_bytes(static_cast<uint64_t>(plan.memory.offload_tiles)) +
             " per rank) or turn off pipeline_read/pipeline_write, ";
    if (plan.stage < 3)
      fix += "use a higher ZeRO stage (zero_optimization.stage is " + std::to_string(plan.stage) +
             "; stage 3 partitions the parameters too), ";
    fix += "or run more ranks spread over more nodes";
    if (plan.activations_counted && plan.memory.activations > 0)
      fix =
          "lower train_micro_batch_size_per_gpu or turn on activation_checkpointing "
          "(activations take " +
          format_bytes(static_cast<uint64_t>(plan.memory.activations)) + " per rank), " + fix;
    problems.push_back(
        std::string("RAM: the ") +
        (plan.activations_counted ? "model states, buffers, activations and the process need "
                                  : "model states and buffers need ") +
        per_rank_and_node(ram, local) + " but this node has " +
        available_text(*node.ram_available, local) + " available (MemAvailable); to fit, " + fix +
        (plan.activations_counted ? "" : ". Activations are not counted, so leave room for them"));
  }
  if (plan.memory.disk() > 0 && node.disk_available &&
      plan.memory.disk() * local > *node.disk_available) {
    problems.push_back(
        "disk: the swap files need " + per_rank_and_node(plan.memory.disk(), local) +
        " at zero_optimization." + (plan.swap ? "offload_optimizer" : "offload_param") +
        ".nvme_path \"" + plan.disk_path() + "\" but its file system has " +
        available_text(*node.disk_available, local) +
        " free; to fit, set nvme_path to a folder on a disk with more free space, or run more "
        "ranks spread over more nodes (each rank swaps only the partition it owns)");
  }
  if (problems.empty()) return Status::Ok();
  std::string message = "rank " + std::to_string(plan.rank) + " of " + std::to_string(plan.world) +
                        " (ZeRO stage " + std::to_string(plan.stage) +
                        ") does not fit on this node: ";
  for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
  message += " (`dscore plan` prints the whole plan)";
  return Status(DSCORE_RESOURCE_EXHAUSTED, message);
}

namespace {

// Each stage once: its layers, ranks, activations in flight and boundary
// traffic, and the schedule's bubble.
std::string format_pipeline(const std::vector<ZeroPlan>& plans) {
  const PipeStagePlan& p0 = *plans.front().pipe;
  char line[320];
  if (p0.virtual_stages > 1) {
    std::snprintf(line, sizeof line,
                  "  pipeline: %d stages x %d data-parallel, interleaved (%d chunks a stage) over "
                  "%d micro-batches, bubble (p - 1) / (v m + p - 1) = %.3f\n",
                  p0.stages, p0.data_parallel, p0.virtual_stages, p0.micro_batches, p0.bubble);
  } else {
    std::snprintf(line, sizeof line,
                  "  pipeline: %d stages x %d data-parallel, 1F1B over %d micro-batches, bubble "
                  "(p - 1) / (m + p - 1) = %.3f\n",
                  p0.stages, p0.data_parallel, p0.micro_batches, p0.bubble);
  }
  std::string out = line;
  for (const ZeroPlan& plan : plans) {
    const PipeStagePlan& s = *plan.pipe;
    if (plan.rank % s.stage_ranks != 0) continue;  // one line per stage
    std::snprintf(
        line, sizeof line,
        "    stage %d (ranks %d-%d): layers %s%s, %lld parameters, activations of "
        "up to %d micro-batches, per micro-batch receives %s and sends %s\n",
        s.stage, plan.rank, plan.rank + s.stage_ranks - 1, s.layers.c_str(),
        s.tied_copies > 0 ? (" + " + std::to_string(s.tied_copies) + " tied copy").c_str() : "",
        static_cast<long long>(plan.numel), s.in_flight, format_bytes(s.boundary_in).c_str(),
        format_bytes(s.boundary_out).c_str());
    out += line;
  }
  return out;
}

}  // namespace

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
  if (p0.tensor_parallel > 1) {
    std::snprintf(line, sizeof line,
                  "  tensor parallelism: each rank holds its part (Psi) of the %lld parameters "
                  "split over %d ranks; ZeRO partitions a part over the %d rank(s) holding it\n",
                  static_cast<long long>(p0.whole_numel), p0.tensor_parallel, p0.zero_ranks);
    out += line;
  }
  out += "  parallel grid: " + p0.grid + "\n";
  if (p0.pipe) out += format_pipeline(plans);
  out += "  placement: " + p0.placement + "\n";
  auto row = [&](const char* name, auto get) {
    std::snprintf(line, sizeof line, "  %-24s", name);
    out += line;
    for (const ZeroPlan& p : plans) {
      std::snprintf(line, sizeof line, "%16s", get(p).c_str());
      out += line;
    }
    out += "\n";
  };
  using Get = int64_t (*)(const ZeroPlan&);
  auto bytes_row = [&](const char* name, Get get) {
    row(name, [get](const ZeroPlan& p) { return format_bytes(get(p)); });
  };
  const Get parameters = [](const ZeroPlan& p) { return p.memory.parameters; };
  const Get master = [](const ZeroPlan& p) { return p.memory.master; };
  const Get optimizer = [](const ZeroPlan& p) { return p.memory.optimizer; };
  const auto rank_header = [](const ZeroPlan& p) { return "rank " + std::to_string(p.rank); };
  if (p0.on_device) {
    // A GPU's memory, then the host's (device_memory(), host_memory()).
    row("in GPU memory", rank_header);
    if (!p0.params_on_host) bytes_row("parameters", parameters);
    bytes_row("gradients", [](const ZeroPlan& p) { return p.memory.gradients; });
    if (!p0.state_on_host) {
      bytes_row("master weights (fp32)", master);
      bytes_row("optimizer state", optimizer);
    } else if (p0.master_kept + p0.optimizer_kept > 0) {
      bytes_row("kept master (fp32)", [](const ZeroPlan& p) { return p.master_kept; });
      bytes_row("kept optimizer state", [](const ZeroPlan& p) { return p.optimizer_kept; });
    }
    bytes_row("buffers", [](const ZeroPlan& p) { return p.memory.buffers; });
    if (p0.activations_counted)
      bytes_row("activations (declared)", [](const ZeroPlan& p) { return p.memory.activations; });
    bytes_row("total (GPU)", [](const ZeroPlan& p) { return p.device_memory(); });
    row("in host memory", rank_header);
    if (p0.params_on_host) bytes_row("parameters", parameters);
    if (p0.state_on_host) {
      bytes_row("master weights (fp32)",
                [](const ZeroPlan& p) { return p.memory.master - p.master_kept; });
      bytes_row("optimizer state",
                [](const ZeroPlan& p) { return p.memory.optimizer - p.optimizer_kept; });
    }
  } else {
    row("in RAM", rank_header);
    bytes_row("parameters", parameters);
    bytes_row("gradients", [](const ZeroPlan& p) { return p.memory.gradients; });
    bytes_row("master weights (fp32)", master);
    bytes_row("optimizer state", optimizer);
    bytes_row("model states", [](const ZeroPlan& p) { return p.memory.model_states(); });
    bytes_row("buffers", [](const ZeroPlan& p) { return p.memory.buffers; });
  }
  if (p0.memory.host_staging > 0)
    bytes_row("host staging", [](const ZeroPlan& p) { return p.memory.host_staging; });
  if (p0.memory.offload_tiles > 0)
    row(p0.swap ? "offload tile buffers" : "offload buffers",
        [](const ZeroPlan& p) { return format_bytes(p.memory.offload_tiles); });
  if (p0.memory.comm_scratch > 0)
    row("comm scratch (mpi)",
        [](const ZeroPlan& p) { return format_bytes(p.memory.comm_scratch); });
  if (p0.activations_counted && !p0.on_device)
    row("activations", [](const ZeroPlan& p) { return format_bytes(p.memory.activations); });
  if (p0.memory.process > 0)
    row("process and allocator", [](const ZeroPlan& p) { return format_bytes(p.memory.process); });
  if (p0.on_device)
    bytes_row("total (host, peak)", [](const ZeroPlan& p) { return p.host_memory(); });
  else
    row("total (peak)", [](const ZeroPlan& p) { return format_bytes(p.memory.total()); });
  if (p0.swap) {
    std::snprintf(line, sizeof line,
                  "  on disk (offload_optimizer nvme_path \"%s\"; %lld tile buffer(s) of %lld "
                  "parameters in RAM):\n",
                  p0.swap->nvme_path.c_str(), static_cast<long long>(p0.swap->buffers),
                  static_cast<long long>(p0.swap->tile_elements));
    out += line;
    row("disk master (fp32)", [](const ZeroPlan& p) { return format_bytes(p.memory.disk_master); });
    row("disk optimizer state",
        [](const ZeroPlan& p) { return format_bytes(p.memory.disk_optimizer); });
  }
  if (p0.memory.disk_parameters > 0) {
    out += "  on disk (offload_param nvme_path \"" + p0.param_nvme_path + "\"):\n";
    row("disk parameters",
        [](const ZeroPlan& p) { return format_bytes(p.memory.disk_parameters); });
  }
  if (p0.memory.disk() > 0)
    row("disk total", [](const ZeroPlan& p) { return format_bytes(p.memory.disk()); });
  out += "  communication per optimizer step (elements of the full buffer of each collective):\n";
  for (const auto& [op, elements] : p0.comm_elements) {
    std::snprintf(
        line, sizeof line, "    %-28s %16lld  (%.3f Psi)\n", op.c_str(),
        static_cast<long long>(elements),
        p0.numel > 0 ? static_cast<double>(elements) / static_cast<double>(p0.numel) : 0.0);
    out += line;
  }
  if (p0.model_traffic) {
    const ModelTraffic& t = *p0.model_traffic;
    out +=
        "  the model's own collectives per optimizer step (rank 0; bytes of each call's input):\n";
    for (const auto& [what, calls, bytes] :
         {std::tuple{"tensor-parallel allreduce", t.tensor_parallel_calls, t.tensor_parallel_bytes},
          std::tuple{"sequence-parallel all_to_all", t.sequence_parallel_calls,
                     t.sequence_parallel_bytes},
          std::tuple{"expert-parallel all_to_all", t.expert_parallel_calls,
                     t.expert_parallel_bytes}}) {
      if (calls == 0) continue;
      std::snprintf(line, sizeof line, "    %-28s %16lld calls, %lld B (%s)\n", what,
                    static_cast<long long>(calls), static_cast<long long>(bytes),
                    format_bytes(bytes).c_str());
      out += line;
    }
  }
  for (const std::string& note : p0.notes) out += "  note: " + note + "\n";
  return out;
}

}  // namespace dscore::zero
