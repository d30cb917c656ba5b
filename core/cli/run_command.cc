// `dscore run --config F [--steps N] [-n RANKS] [--threads N] [--resume DIR]
// [--log-format text|json] [--allow-unsupported] [--trust-config-plugin-paths]`
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/base/process_heap.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/cli/run_training.h"

namespace dscore::cli {

int run_command(const std::vector<std::string>& args) {
  // DSCORE_MALLOC is read here, so a wrong value stops the job before any
  // rank starts; run_training applies it (process_heap.h).
  if (const Result<HeapPolicy> heap = heap_policy_from_env(); !heap.ok()) {
    std::fprintf(stderr, "dscore: %s\n", heap.status().message().c_str());
    return kExitUsage;
  }
  po::options_description options("run options");
  int64_t steps = 0;
  int ranks = 1, threads = 0;
  std::string config_path, log_format = "text", resume;
  bool allow_unsupported = false, trust_plugin_paths = false;
  options.add_options()("config,c", po::value<std::string>(&config_path)->required(),
                        "the ds_config.json to train from")(
      "steps", po::value<int64_t>(&steps), "optimizer steps to run (overrides \"train_steps\")")(
      "n,n", po::value<int>(&ranks)->default_value(1), "number of local ranks to start")(
      "threads", po::value<int>(&threads),
      "compute threads per rank (default: OMP_NUM_THREADS, else this machine's CPUs shared "
      "by the ranks on it)")(
      "resume", po::value<std::string>(&resume),
      "continue from the newest checkpoint in this folder (any world size and ZeRO stage)")(
      "log-format", po::value<std::string>(&log_format)->default_value("text"),
      "text, or json: one JSON object per log line and per step")(
      "allow-unsupported", po::bool_switch(&allow_unsupported),
      "train without the DeepSpeed features dscore does not implement (their keys become "
      "warnings instead of errors)")(
      "trust-config-plugin-paths", po::bool_switch(&trust_plugin_paths),
      "load plugins from the config's \"plugins\": {\"paths\"} outside the config file's "
      "folder (refused otherwise: a config shared from elsewhere could run any code)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional,
                     "usage: dscore run --config F [--steps N] [-n RANKS] [--threads N] "
                     "[--resume DIR] [--log-format text|json] [--allow-unsupported] "
                     "[--trust-config-plugin-paths]",
                     &vm, &exit_code))
    return exit_code;
  RunOptions run;
  run.config_path = config_path;
  if (vm.count("steps")) {
    if (steps <= 0) {
      std::fprintf(stderr, "dscore: --steps must be a positive number of optimizer steps\n");
      return kExitUsage;
    }
    run.steps = steps;
  }
  if (ranks < 1) {
    std::fprintf(stderr, "dscore: -n must be at least 1\n");
    return kExitUsage;
  }
  if (!log_format_ok(log_format)) return kExitUsage;
  if (vm.count("threads") && threads < 1) {
    std::fprintf(stderr, "dscore: --threads must be at least 1\n");
    return kExitUsage;
  }
  run.log_json = log_format == "json";
  run.ranks = ranks;
  run.rank_args = {"run", "--config", config_path, "--log-format", log_format};
  if (run.steps) run.rank_args.insert(run.rank_args.end(), {"--steps", std::to_string(*run.steps)});
  if (vm.count("threads")) {
    run.threads = threads;
    run.rank_args.insert(run.rank_args.end(), {"--threads", std::to_string(threads)});
  }
  run.allow_unsupported = allow_unsupported;
  if (allow_unsupported) run.rank_args.push_back("--allow-unsupported");
  run.trust_config_plugin_paths = trust_plugin_paths;
  if (trust_plugin_paths) run.rank_args.push_back("--trust-config-plugin-paths");
  run.resume_dir = resume;
  if (!resume.empty()) run.rank_args.insert(run.rank_args.end(), {"--resume", resume});
  // mpirun gives its ranks a pseudo-terminal, so the process that started
  // the job decides (its stdout is the user's) and tells the ranks.
  const char* inherited = std::getenv("DSCORE_PROGRESS_BAR");
  run.progress_bar =
      inherited != nullptr ? std::string(inherited) == "1" : isatty(STDOUT_FILENO) != 0;
  setenv("DSCORE_PROGRESS_BAR", run.progress_bar ? "1" : "0", /*overwrite=*/1);
  return run_training(run);
}

}  // namespace dscore::cli
