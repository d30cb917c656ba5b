// `dscore run --config F [--steps N] [-n RANKS] [--threads N] [--resume DIR]
// [--log-format text|json] [--allow-unsupported] [--trust-config-plugin-paths]
// [--hostfile F [--include H|--exclude H] [--num_nodes N] [--num_gpus N]
//  [--master_addr A] [--master_port P] [--launcher auto|openmpi|slurm]] [--dry-run]``
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/base/process_heap.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/cli/run_training.h"
#include "core/comm/hostfile.h"

namespace dscore::cli {
namespace {

// The hostfile's hosts after --include/--exclude/--num_nodes/--num_gpus.
Result<std::vector<comm::HostSlots>> read_hosts(const std::string& path,
                                                const comm::HostFilter& filter) {
  std::ifstream in(path);
  if (!in)
    return not_found("--hostfile " + path + ": cannot read it (" + std::strerror(errno) + ")");
  std::stringstream text;
  text << in.rdbuf();
  DSCORE_ASSIGN_OR_RETURN(std::vector<comm::HostSlots> pool,
                          comm::parse_hostfile(text.str(), path));
  return comm::select_hosts(pool, filter);
}

}  // namespace

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
  bool allow_unsupported = false, trust_plugin_paths = false, dry_run = false;
  std::string hostfile, launcher = "auto";
  comm::HostFilter filter;
  comm::HostLaunch hosts;
  po::options_description multinode("across hosts (DeepSpeed's launcher flags)");
  multinode.add_options()("hostfile", po::value<std::string>(&hostfile),
                          "start the ranks on the hosts of this DeepSpeed hostfile "
                          "('<host> slots=<N>' per line)")(
      "include", po::value<std::string>(&filter.include),
      "only these hosts or slots: host1@host2:0,1")(
      "exclude", po::value<std::string>(&filter.exclude), "all but these hosts or slots")(
      "num_nodes", po::value<int>(&filter.num_nodes), "the first N hosts of the hostfile")(
      "num_gpus", po::value<int>(&filter.num_slots), "the first N slots of each host")(
      "slots", po::value<int>(&filter.num_slots), "the same as --num_gpus")(
      "master_addr", po::value<std::string>(&hosts.master_addr),
      "where rank 0 serves the job's key-value store (default: the first host)")(
      "master_port", po::value<int>(&hosts.master_port),
      "its port (default: $MASTER_PORT, else 29500; a free one when the first host is this one)")(
      "launcher", po::value<std::string>(&launcher)->default_value("auto"),
      "auto (srun inside a Slurm allocation, else mpirun), openmpi or slurm")(
      "dry-run", po::bool_switch(&dry_run),
      "print the launcher command (with -n or --hostfile) instead of running it");
  options.add_options()("config,c", po::value<std::string>(&config_path)->required(),
                        "the ds_config.json to train from")(
      "steps", po::value<int64_t>(&steps), "optimizer steps to run (overrides \"train_steps\")")(
      "n,n", po::value<int>(&ranks)->default_value(1), "number of local ranks to start")(
      "threads", po::value<int>(&threads),
      "compute threads per rank (default: OMP_NUM_THREADS, else this machine's CPUs shared "
      "by the ranks on it)")(
      "resume", po::value<std::string>(&resume),
      "continue from the newest checkpoint in this folder (any world size and ZeRO stage; a "
      "folder DeepSpeed saved is converted first, into checkpoint_dir/imported-deepspeed)")(
      "log-format", po::value<std::string>(&log_format)->default_value("text"),
      "text, or json: one JSON object per log line and per step")(
      "allow-unsupported", po::bool_switch(&allow_unsupported),
      "train without the DeepSpeed features dscore does not implement (their keys become "
      "warnings instead of errors)")(
      "trust-config-plugin-paths", po::bool_switch(&trust_plugin_paths),
      "load plugins from the config's \"plugins\": {\"paths\"} outside the config file's "
      "folder (refused otherwise: a config shared from elsewhere could run any code)");
  options.add(multinode);
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional,
                     "usage: dscore run --config F [--steps N] [-n RANKS] [--threads N] "
                     "[--resume DIR] [--log-format text|json] [--allow-unsupported] "
                     "[--trust-config-plugin-paths] [--hostfile F ...] [--dry-run]",
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
  // Every launcher flag works or is refused: none is ignored.
  if (hostfile.empty()) {
    for (const char* flag :
         {"include", "exclude", "num_nodes", "num_gpus", "slots", "master_addr", "master_port"})
      if (vm.count(flag)) {
        std::fprintf(stderr, "dscore: --%s chooses hosts of a --hostfile; give the hostfile\n",
                     flag);
        return kExitUsage;
      }
    if (!vm["launcher"].defaulted()) {
      std::fprintf(stderr,
                   "dscore: --launcher starts the hosts of a --hostfile; give the hostfile "
                   "(-n starts local ranks under mpirun)\n");
      return kExitUsage;
    }
    if (dry_run && ranks == 1) {
      std::fprintf(stderr,
                   "dscore: --dry-run prints the launcher command of -n N or --hostfile F; "
                   "one local rank has none\n");
      return kExitUsage;
    }
  } else {
    if (vm.count("n") && !vm["n"].defaulted()) {
      std::fprintf(stderr,
                   "dscore: -n counts local ranks; with --hostfile the hostfile's slots "
                   "(and --num_gpus) decide: drop -n\n");
      return kExitUsage;
    }
    if (vm.count("master_port") && (hosts.master_port < 1 || hosts.master_port > 65535)) {
      std::fprintf(stderr, "dscore: --master_port %d is not a TCP port (1-65535)\n",
                   hosts.master_port);
      return kExitUsage;
    }
    if (vm.count("num_gpus") && vm.count("slots")) {
      std::fprintf(stderr, "dscore: --num_gpus and --slots are the same setting: give one\n");
      return kExitUsage;
    }
    const Result<std::vector<comm::HostSlots>> chosen = read_hosts(hostfile, filter);
    if (!chosen.ok()) {
      std::fprintf(stderr, "dscore: %s\n", chosen.status().message().c_str());
      return kExitUsage;
    }
    hosts.hosts = *chosen;
    hosts.launcher = launcher;
  }
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
  if (!hostfile.empty()) run.hosts = hosts;
  run.dry_run = dry_run;
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
