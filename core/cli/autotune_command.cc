// `dscore autotune --config F [-n RANKS] [--memory SIZE] [--trial-timeout S]
// [--log-format text|json] [--run]`: the fastest config that fits
// (core/autotune/autotune.h, docs/autotuning.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/autotune/autotune.h"
#include "core/autotune/report.h"
#include "core/checkpoint/consolidate.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"

namespace dscore::cli {
namespace {

void print_trial(const autotune::TrialRecord& r, int64_t trial, int64_t planned, bool started,
                 bool json, autotune::Metric metric) {
  if (json) {
    if (started) return;
    json::Value v = autotune::record_json(r);
    if (trial > 0) v.set("trial", json::Value(trial));
    v.set("type", json::Value(trial > 0 ? "autotune_trial" : "autotune_confirmation"));
    std::printf("%s\n", json::serialize(v).c_str());
  } else if (started) {
    std::printf("[trial %lld/%lld] %s ...\n", static_cast<long long>(trial),
                static_cast<long long>(planned), r.candidate.name().c_str());
  } else if (trial == 0 && r.metric) {
    std::printf("[confirm] %s: %.4g %s, the mean of %lld runs\n", r.candidate.name().c_str(),
                *r.metric, autotune::metric_unit(metric), static_cast<long long>(r.runs));
  } else if (r.metric) {
    std::printf("[trial %lld] %s: %.4g %s (%.4f s/step)%s\n", static_cast<long long>(trial),
                r.candidate.name().c_str(), *r.metric, autotune::metric_unit(metric),
                r.seconds_per_step.value_or(0),
                r.state == autotune::TrialState::kReused ? ", reused" : "");
  } else {
    std::printf("[trial %lld] %s: failed: %s\n", static_cast<long long>(trial),
                r.candidate.name().c_str(), r.reason.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int autotune_command(const std::vector<std::string>& args) {
  po::options_description options("autotune options");
  autotune::AutotuneRequest request;
  std::string memory, hostfile, log_format = "text";
  int64_t timeout = 600;
  bool then_run = false;
  options.add_options()("config,c", po::value<std::string>(&request.config_path)->required(),
                        "the ds_config.json to tune (its \"autotuning\" section, or the defaults)")(
      "n,n", po::value<int>(&request.ranks)->default_value(1),
      "data-parallel ranks each trial runs on this machine")(
      "hostfile", po::value<std::string>(&hostfile), "(refused: multi-node launch is not built)")(
      "memory", po::value<std::string>(&memory),
      "RAM the ranks may use, e.g. 8GB (default: this machine's available memory)")(
      "trial-timeout", po::value<int64_t>(&timeout)->default_value(600),
      "seconds a trial may run before it is killed and recorded as failed")(
      "log-format", po::value<std::string>(&log_format)->default_value("text"),
      "text, or json: one JSON object per trial and one for the result")(
      "run", po::bool_switch(&then_run),
      "train the best config afterwards (DeepSpeed's "
      "--autotuning run)")(
      "allow-unsupported", po::bool_switch(&request.allow_unsupported),
      "as dscore run's: train without the DeepSpeed features dscore does not implement")(
      "trust-config-plugin-paths", po::bool_switch(&request.trust_config_plugin_paths),
      "as dscore run's: load plugins from the config's plugins.paths outside its folder");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional,
                     "usage: dscore autotune --config F [-n RANKS] [--memory SIZE] "
                     "[--trial-timeout S] [--log-format text|json] [--run]",
                     &vm, &exit_code))
    return exit_code;
  if (vm.count("hostfile")) {
    std::fprintf(stderr,
                 "dscore: autotune --hostfile: launching trials across machines is not built yet; "
                 "tune on one machine with -n RANKS\n");
    return kExitUsage;
  }
  if (request.ranks < 1 || timeout < 1) {
    std::fprintf(stderr, "dscore: -n and --trial-timeout must be at least 1\n");
    return kExitUsage;
  }
  if (!log_format_ok(log_format)) return kExitUsage;
  if (vm.count("memory")) {
    auto bytes = checkpoint::parse_size(memory);
    if (!bytes.ok()) {
      std::fprintf(stderr, "dscore: --memory: %s\n", bytes.status().message().c_str());
      return kExitUsage;
    }
    request.memory_bytes = static_cast<int64_t>(*bytes);
  }
  request.trial_timeout = std::chrono::seconds(timeout);
  std::error_code ec;
  request.dscore_executable = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    std::fprintf(stderr, "dscore: cannot find this executable (/proc/self/exe): %s\n",
                 ec.message().c_str());
    return kExitFailure;
  }
  const bool json = log_format == "json";
  autotune::Metric metric = autotune::Metric::kThroughput;
  auto report = autotune::run_autotune(
      request, [&](const autotune::TrialRecord& r, int64_t trial, int64_t planned, bool started) {
        print_trial(r, trial, planned, started, json, metric);
      });
  if (!report.ok()) {
    const std::string& message = report.status().message();
    for (size_t at = 0; at <= message.size();) {
      const size_t end = std::min(message.find('\n', at), message.size());
      std::fprintf(stderr, "error: %s\n", message.substr(at, end - at).c_str());
      at = end + 1;
    }
    return report.status().code() == DSCORE_INVALID_ARGUMENT ? kExitUsage : kExitFailure;
  }
  metric = report->metric;
  if (json) {
    json::Value v = json::Value::object();
    v.set("type", json::Value("autotune_result"));
    v.set("best", report->best ? json::Value(report->trials[*report->best].candidate.name())
                               : json::Value());
    v.set("best_command", json::Value(report->best_command));
    v.set("results_dir", json::Value(report->results_dir));
    v.set("stop_reason", json::Value(report->stop_reason));
    std::printf("%s\n", json::serialize(v).c_str());
  } else {
    std::printf("\n%s", autotune::format_table(*report, /*all=*/false).c_str());
  }
  std::fflush(stdout);
  if (!report->best) return kExitFailure;
  if (!then_run) return kExitOk;
  const autotune::TrialRecord& best = report->trials[*report->best];
  std::vector<std::string> run_args = {
      "--config",
      (std::filesystem::path(report->results_dir) / "best_config.json").string(),
      "-n",
      std::to_string(request.ranks),
      "--log-format",
      log_format,
      "--trust-config-plugin-paths"};
  if (best.candidate.threads > 0)
    run_args.insert(run_args.end(), {"--threads", std::to_string(best.candidate.threads)});
  if (request.allow_unsupported) run_args.push_back("--allow-unsupported");
  return run_command(run_args);
}

}  // namespace dscore::cli
