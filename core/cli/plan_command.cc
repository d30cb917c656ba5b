// `dscore plan --config F -n N`: bytes per rank for parameters, gradients,
// master weights, optimizer state and buffers, and elements communicated per
// step, computed before anything is allocated; with NVMe optimizer offload
// the tile buffers in RAM and the swap files on disk; for "device": "cuda"
// what is in GPU memory and what in host memory. Ends with whether the
// ranks on this machine fit its available RAM, disk and GPU memory. With
// --inference, the engine `dscore generate` and `serve` build from the config
// (ZeRO-Inference's stage 3 where it offloads the parameters, -n ranks
// splitting the model), and the KV cache.
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

namespace dscore::cli {

int plan_command(const std::vector<std::string>& args) {
  po::options_description options("plan options");
  std::string path;
  int ranks = 1;
  int per_node = 0;
  InferenceOffload offload;
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
      "with --inference --offload-param nvme: the swap folder");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(
          args, options, positional,
          "usage: dscore plan --config F [-n RANKS] [--inference [--offload-param cpu|nvme]]", &vm,
          &exit_code))
    return exit_code;
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
