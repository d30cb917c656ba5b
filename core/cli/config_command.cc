// `dscore config check F [--world-size N] [--allow-unsupported]` and `dscore config reference`.
#include <cstdio>

#include "core/base/strings.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/config/config.h"
#include "core/config/reference.h"
#include "core/engine/environment.h"
#include "core/engine/initialize.h"

namespace dscore::cli {
namespace {

int check(const std::vector<std::string>& args) {
  po::options_description options("config check options");
  std::string path;
  int world_size = 1;
  bool allow_unsupported = false;
  options.add_options()("file", po::value<std::string>(&path)->required(),
                        "the ds_config.json to check")(
      "world-size", po::value<int>(&world_size)->default_value(1),
      "data-parallel world size used for the batch triad")(
      "allow-unsupported", po::bool_switch(&allow_unsupported),
      "report DeepSpeed features dscore does not implement as warnings, as `dscore run "
      "--allow-unsupported` would");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional,
                     "usage: dscore config check F [--world-size N] [--allow-unsupported]", &vm,
                     &exit_code))
    return exit_code;
  if (world_size < 1) {
    std::fprintf(stderr, "dscore: --world-size must be at least 1\n");
    return kExitUsage;
  }
  InitializeOptions init;
  // DSCORE_TRUST_CONFIG_PLUGIN_PATHS=1 (plugin_host/trust.h).
  init.trust_config_plugin_paths = read_engine_environment().trust_config_plugin_paths;
  init.job = comm::JobEnv{};
  init.job->world_size = world_size;  // the batch triad's data-parallel size
  init.allow_unsupported = allow_unsupported;
  const std::optional<Setup> setup = prepare_or_report(path, init);
  if (!setup) return kExitUsage;
  const config::LoadedConfig& loaded = setup->loaded;
  for (const config::ConfigNotice& n : loaded.notices)
    std::fprintf(stderr, "note: %s: %s\n", n.path.c_str(), n.message.c_str());
  std::printf("%s\n", json::serialize(loaded.resolved, /*pretty=*/true).c_str());
  return kExitOk;
}

const char* kConfigUsage =
    "usage: dscore config check F [--world-size N] [--allow-unsupported]\n"
    "                                                validate F and print the resolved config\n"
    "       dscore config reference                  print every config key (Markdown)\n";

}  // namespace

int config_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kConfigUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "check") return check(rest);
  if (args[0] == "reference") {
    std::fputs(config::config_reference_markdown().c_str(), stdout);
    return kExitOk;
  }
  std::fprintf(stderr, "dscore config: unknown subcommand '%s'%s\n\n%s", args[0].c_str(),
               did_you_mean_suffix(args[0], {"check", "reference"}).c_str(), kConfigUsage);
  return kExitUsage;
}

}  // namespace dscore::cli
