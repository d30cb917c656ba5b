// `dscore loss-scale --config F --overflows PATTERN`: the fp16 loss scale the
// engine's scaler (core/zero/loss_scaler.h) reaches when the boundary steps
// overflow as PATTERN says ('O' overflow, 'C' clean, one character per
// step), as CSV: the scale before the first update, then the scale and the
// remaining hysteresis after each update, printed as Python's repr() prints
// them so the trace compares with DeepSpeed's DynamicLossScaler text to the
// last digit. An overflow at the minimum scale ends the trace with the
// scaler's error (exit 1), as it ends a run.
#include <dscore/cpp/python_float.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/engine/environment.h"
#include "core/engine/initialize.h"
#include "core/zero/loss_scaler.h"

namespace dscore::cli {
namespace {

const char* kLossScaleUsage = "usage: dscore loss-scale --config F --overflows PATTERN";

}  // namespace

int loss_scale_command(const std::vector<std::string>& args) {
  po::options_description options("loss-scale options");
  std::string config_path, pattern;
  options.add_options()("config,c", po::value<std::string>(&config_path)->required(),
                        "the ds_config.json whose fp16 section configures the scaler")(
      "overflows", po::value<std::string>(&pattern)->required(),
      "one character per step: O = the step's gradients overflow, C = clean");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional, kLossScaleUsage, &vm, &exit_code)) return exit_code;
  for (char c : pattern)
    if (c != 'O' && c != 'C') {
      std::fprintf(stderr,
                   "dscore: --overflows: '%c' is not a step: use O (overflow) or C (clean), "
                   "e.g. --overflows OOCCCC\n",
                   c);
      return kExitUsage;
    }
  InitializeOptions init;
  // DSCORE_TRUST_CONFIG_PLUGIN_PATHS=1 (plugin_host/trust.h).
  init.trust_config_plugin_paths = read_engine_environment().trust_config_plugin_paths;
  init.own_model = true;  // the model does not shape the scale
  const std::optional<Setup> setup = prepare_or_report(config_path, init);
  if (!setup) return kExitUsage;
  const config::LoadedConfig& loaded = setup->loaded;
  if (!loaded.config->fp16.enabled) {
    std::fprintf(stderr,
                 "error: %s: fp16: the loss scale is 1 and never changes without fp16; set "
                 "\"fp16\": {\"enabled\": true}\n",
                 loaded.source_name.c_str());
    return kExitUsage;
  }
  zero::LossScaler scaler = zero::LossScaler::from_config(loaded.config->fp16);
  auto repr = [](double v) { return sdk::python_float_repr(v); };
  std::printf("update,overflow,loss_scale,hysteresis\n");
  std::printf("0,,%s,%lld\n", repr(scaler.scale()).c_str(),
              static_cast<long long>(scaler.hysteresis_left()));
  for (size_t i = 0; i < pattern.size(); ++i) {
    const bool overflow = pattern[i] == 'O';
    Status s = scaler.update(overflow);
    if (!s.ok()) {
      std::fprintf(stderr, "error: update %zu: %s\n", i + 1, s.message().c_str());
      return kExitFailure;
    }
    std::printf("%zu,%d,%s,%lld\n", i + 1, overflow ? 1 : 0, repr(scaler.scale()).c_str(),
                static_cast<long long>(scaler.hysteresis_left()));
  }
  return kExitOk;
}

}  // namespace dscore::cli
