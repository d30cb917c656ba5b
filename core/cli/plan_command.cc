// `dscore plan --config F -n N`: bytes per rank for parameters, gradients,
// master weights, optimizer state and buffers, and elements communicated per
// step, computed before anything is allocated.
#include <cstdio>

#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/config/config.h"
#include "core/engine/planner.h"

namespace dscore::cli {

int plan_command(const std::vector<std::string>& args) {
  po::options_description options("plan options");
  std::string path;
  int ranks = 1;
  options.add_options()("config,c", po::value<std::string>(&path)->required(),
                        "the ds_config.json to plan")("n,n",
                                                      po::value<int>(&ranks)->default_value(1),
                                                      "number of ranks (data-parallel world size)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional, "usage: dscore plan --config F [-n RANKS]", &vm,
                     &exit_code))
    return exit_code;
  if (ranks < 1) {
    std::fprintf(stderr, "dscore: -n must be at least 1\n");
    return kExitUsage;
  }
  InitializeOptions init;
  init.job = comm::JobEnv{};
  init.job->world_size = ranks;
  const std::optional<Setup> setup = prepare_or_report(path, init);
  if (!setup) return kExitUsage;
  auto plans = plan_job(*setup, ranks);
  if (!plans.ok()) {
    std::fprintf(stderr, "error: %s\n", plans.status().message().c_str());
    return kExitFailure;
  }
  std::fputs(zero::format_plans(*plans).c_str(), stdout);
  return kExitOk;
}

}  // namespace dscore::cli
