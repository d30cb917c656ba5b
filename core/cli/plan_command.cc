// `dscore plan --config F -n N`: bytes per rank for parameters, gradients,
// master weights, optimizer state and buffers, and elements communicated per
// step, computed before anything is allocated; with NVMe optimizer offload
// the tile buffers in RAM and the swap files on disk; for "device": "cuda"
// what is in GPU memory and what in host memory. Ends with whether the
// ranks on this machine fit its available RAM, disk and GPU memory. With
// --inference, the engine `dscore generate` and `serve` build from the config
// (ZeRO-Inference's stage 3 where it offloads the parameters, -n ranks
// splitting the model), and the KV cache. With --nodes N --ranks-per-node R
// --link ... [--compute-seconds S], each collective's traffic inside and
// across nodes, and the step's time (zero/scale_plan.h).
#include <algorithm>
#include <cstdio>

#include "core/app/generation.h"
#include "core/app/planner.h"
#include "core/base/strings.h"
#include "core/checkpoint/durable_file.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/config/config.h"
#include "core/config/json.h"
#include "core/device/select.h"
#include "core/engine/environment.h"
#include "core/engine/job_fit.h"
#include "core/zero/scale_plan.h"

namespace dscore::cli {

int plan_command(const std::vector<std::string>& args) {
  po::options_description options("plan options");
  std::string path;
  int ranks = 1;
  int per_node = 0;
  InferenceOffload offload;
  int nodes = 0;
  std::string link;
  double compute_seconds = -1;
  options.add_options()("config,c", po::value<std::string>(&path)->required(),
                        "the ds_config.json to plan")("n,n",
                                                      po::value<int>(&ranks)->default_value(1),
                                                      "number of ranks (data-parallel world size)")(
      "ranks-per-node", po::value<int>(&per_node)->default_value(0),
      "ranks sharing this machine's RAM and disk (default: all of them)")(
      "inference",
      "plan `dscore generate`/`serve`'s engine for this config instead (-n: "
      "tensor-parallel ranks): the weights where they live, no optimizer state")(
      "offload-param", po::value<std::string>(&offload.offload_param),
      "with --inference: none, cpu or nvme (ZeRO-Inference), as generate takes it")(
      "nvme-path", po::value<std::string>(&offload.nvme_path),
      "with --inference --offload-param nvme: the swap folder")(
      "nodes", po::value<int>(&nodes), "plan N nodes of --ranks-per-node ranks (instead of -n)")(
      "link", po::value<std::string>(&link)->default_value("intra=50,inter=12.5"),
      "with --nodes: GB/s inside a node and over each node's link to the others")(
      "compute-seconds", po::value<double>(&compute_seconds),
      "with --nodes: one rank's compute per step, measured (e.g. `dscore run` on one node at "
      "the same micro-batch): the step time is this plus the communication");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(
          args, options, positional,
          "usage: dscore plan --config F [-n RANKS | --nodes N --ranks-per-node R [--link "
          "intra=GB/s,inter=GB/s] [--compute-seconds S]] [--inference [--offload-param cpu|nvme]]",
          &vm, &exit_code))
    return exit_code;
  std::optional<zero::LinkRates> links;
  if (vm.count("nodes") != 0) {
    if (nodes < 1 || per_node < 1 || !vm["n"].defaulted()) {
      std::fprintf(stderr,
                   "dscore: --nodes N needs --ranks-per-node R (at least 1 each) and no -n: the "
                   "job is N x R ranks\n");
      return kExitUsage;
    }
    ranks = nodes * per_node;
    auto rates = zero::parse_link_rates(link);
    if (!rates.ok()) {
      std::fprintf(stderr, "dscore: %s\n", rates.status().message().c_str());
      return kExitUsage;
    }
    links = *rates;
  } else if (compute_seconds >= 0 || !vm["link"].defaulted()) {
    std::fprintf(stderr, "dscore: --link and --compute-seconds go with --nodes\n");
    return kExitUsage;
  }
  if (ranks < 1 || per_node < 0 || per_node > ranks) {
    std::fprintf(stderr, "dscore: -n must be at least 1 and --ranks-per-node at most -n\n");
    return kExitUsage;
  }
  InitializeOptions init;
  // DSCORE_TRUST_CONFIG_PLUGIN_PATHS=1 (plugin_host/trust.h).
  init.trust_config_plugin_paths = read_engine_environment().trust_config_plugin_paths;
  init.job = comm::JobEnv{};
  init.job->world_size = ranks;
  std::optional<Setup> setup;
  if (vm.count("inference") != 0) {
    // The config generation builds (core/app/generation.h), as text.
    auto text = checkpoint::read_text_file(path, 64u << 20);
    auto config = text.ok() ? json::parse(*text, path) : Result<json::Value>(text.status());
    auto engine_config = config.ok() ? inference_config(*config, offload, ranks)
                                     : Result<json::Value>(config.status());
    if (!engine_config.ok()) return report_failure(engine_config.status());
    const size_t slash = path.rfind('/');
    setup = prepare_text_or_report(json::serialize(*engine_config), path,
                                   slash == std::string::npos ? "." : path.substr(0, slash), init);
  } else {
    setup = prepare_or_report(path, init);
  }
  if (!setup) return kExitUsage;
  if (auto errors = config::placement_errors(*setup->loaded.config); !errors.empty()) {
    for (const config::ConfigError& e : errors)
      std::fprintf(stderr, "error: %s\n",
                   config::format_error(e, setup->loaded.source_name).c_str());
    return kExitUsage;
  }
  auto plans = plan_job(*setup, ranks);
  if (!plans.ok()) {
    std::fprintf(stderr, "error: %s\n", plans.status().message().c_str());
    return kExitFailure;
  }
  std::fputs(zero::format_plans(*plans).c_str(), stdout);
  if (links) {
    const std::optional<double> compute =
        compute_seconds >= 0 ? std::optional<double>(compute_seconds) : std::nullopt;
    std::fputs(zero::format_scale(zero::estimate_scale(plans->front(), setup->loaded.config->zero,
                                                       nodes, per_node, *links, compute),
                                  *links)
                   .c_str(),
               stdout);
    return kExitOk;  // the nodes are elsewhere: this machine's fit says nothing of theirs
  }
  if (auto cache = kv_cache_per_sequence(*setup); cache.ok() && cache->has_value()) {
    const KvCachePlan& c = **cache;
    std::printf(
        "generation (dscore generate, serve): KV cache %s per sequence of %lld tokens, "
        "%s for serve's default --batch-size 8\n",
        format_bytes(c.bytes_per_sequence).c_str(), static_cast<long long>(c.context),
        format_bytes(8 * c.bytes_per_sequence).c_str());
  }
  // Every rank's plan is within padding of rank 0's; the largest is checked.
  const zero::ZeroPlan& largest = *std::max_element(
      plans->begin(), plans->end(), [](const zero::ZeroPlan& a, const zero::ZeroPlan& b) {
        return a.memory.total() + a.memory.disk() < b.memory.total() + b.memory.disk();
      });
  const int local = per_node > 0 ? per_node : ranks;
  zero::NodeCapacity node = read_node_capacity(largest, local);
  std::string machine = "this machine (" + std::to_string(local) + " rank(s)):";
  if (largest.on_device) {
    // The first GPU's free memory stands for every rank's.
    auto gpu = device::select_device("cuda", 0, device::CpuStreams::kSynchronous);
    if (gpu.ok()) node.device_available = (*gpu)->available_bytes();
    machine +=
        node.device_available
            ? " GPU memory free " + format_bytes(static_cast<uint64_t>(*node.device_available)) +
                  " per rank, needed " +
                  format_bytes(static_cast<uint64_t>(largest.device_memory())) +
                  (largest.activations_counted ? ";" : " (activations not counted);")
            : " GPU memory not checked (" +
                  (gpu.ok() ? std::string("cudaMemGetInfo failed") : gpu.status().message()) + ");";
  }
  if (node.ram_available)
    machine += " RAM available " + format_bytes(static_cast<uint64_t>(*node.ram_available)) +
               ", needed " + format_bytes(static_cast<uint64_t>(largest.host_memory() * local));
  if (node.disk_available)
    machine += "; disk free at nvme_path " +
               format_bytes(static_cast<uint64_t>(*node.disk_available)) + ", needed " +
               format_bytes(static_cast<uint64_t>(largest.memory.disk() * local));
  const Status fits = zero::check_fits(largest, node);
  std::printf("%s\n  %s\n", machine.c_str(),
              fits.ok() ? "fits" : ("does not fit: " + fits.message()).c_str());
  return kExitOk;
}

}  // namespace dscore::cli
