#include "core/cli/options.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "core/cli/commands.h"

namespace dscore::cli {

bool parse_options(const std::vector<std::string>& args, const po::options_description& options,
                   const po::positional_options_description& positional, const std::string& usage,
                   po::variables_map* vm, int* exit_code) {
  po::options_description all = options;
  all.add_options()("help,h", "show this help");
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), *vm);
    if (vm->count("help")) {
      std::cout << usage << "\n" << all << "\n";
      *exit_code = kExitOk;
      return false;
    }
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << "dscore: " << e.what() << "\n\n" << usage << "\n" << all << "\n";
    *exit_code = kExitUsage;
    return false;
  }
  return true;
}

namespace {

std::optional<Setup> report_setup(Result<Setup> setup) {
  if (!setup.ok()) {
    std::fprintf(stderr, "error: %s\n", setup.status().message().c_str());
    return std::nullopt;
  }
  const config::LoadedConfig& loaded = setup->loaded;
  if (!loaded.ok()) {
    for (const config::ConfigError& e : loaded.errors)
      std::fprintf(stderr, "error: %s\n", config::format_error(e, loaded.source_name).c_str());
    return std::nullopt;
  }
  return std::move(setup).value();
}

}  // namespace

std::optional<Setup> prepare_or_report(const std::string& config_path,
                                       const InitializeOptions& init) {
  return report_setup(prepare(config_path, init));
}

std::optional<Setup> prepare_text_or_report(const std::string& json_text, const std::string& source,
                                            const std::string& config_dir,
                                            const InitializeOptions& init) {
  return report_setup(prepare_text(json_text, source, config_dir, init));
}

Result<std::unique_ptr<plugin_host::SchedulerInstance>> make_schedule(const Setup& setup,
                                                                      double* base_lr) {
  *base_lr = optimizer_base_lr(*setup.selection.optimizer);
  if (!setup.selection.scheduler) return std::unique_ptr<plugin_host::SchedulerInstance>();
  const config::TrainingConfig& cfg = *setup.loaded.config;
  plugin_host::InstanceContext context;
  context.seed = cfg.seed;
  return plugin_host::SchedulerInstance::create(*setup.selection.scheduler->info,
                                                setup.selection.scheduler->params, context,
                                                {*base_lr}, cfg.train_steps);
}

int report_failure(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return kExitFailure;
}

bool log_format_ok(const std::string& format) {
  if (format == "text" || format == "json") return true;
  std::fprintf(stderr, "dscore: --log-format must be text or json, not '%s'\n", format.c_str());
  return false;
}

bool parse_token_list(const std::string& text, std::vector<int32_t>* out) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) return false;
      out->push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return false;
    }
  }
  return !out->empty();
}

}  // namespace dscore::cli
