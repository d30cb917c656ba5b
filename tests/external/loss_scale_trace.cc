// dscore_loss_scale_trace <ds_config.json> <pattern>: the fp16 loss scale
// dscore's LossScaler follows when the iterations overflow as `pattern` says
// ('1' = overflow, '0' = clean, one character per iteration). The scaler is
// built from the config's fp16 section exactly as the engine builds it
// (LossScaler::from_config), so the section's defaults are part of what is
// compared. Prints "initial <scale>", then one line per iteration
// "<iteration> <overflow> <scale after update>", each scale as Python's
// repr of the double; an update that fails (an overflow at the minimum
// scale) prints "error <iteration>" and ends the trace. Used by
// deepspeed/check_loss_scaler.py against DeepSpeed's DynamicLossScaler.
#include <dscore/cpp/python_float.hpp>

#include <cstdio>
#include <string>

#include "core/config/config.h"
#include "core/zero/loss_scaler.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: dscore_loss_scale_trace <ds_config.json> <pattern of 0/1>\n");
    return 2;
  }
  const std::string pattern = argv[2];
  if (pattern.find_first_not_of("01") != std::string::npos) {
    std::fprintf(stderr, "pattern \"%s\": use only 0 (clean) and 1 (overflow)\n", argv[2]);
    return 2;
  }
  const dscore::config::LoadedConfig loaded =
      dscore::config::load_config_file(argv[1], dscore::config::ResolveContext{});
  if (!loaded.ok()) {
    for (const auto& e : loaded.errors)
      std::fprintf(stderr, "error: %s\n",
                   dscore::config::format_error(e, loaded.source_name).c_str());
    return 2;
  }
  if (!loaded.config->fp16.enabled) {
    std::fprintf(stderr, "%s: fp16.enabled is not true: there is no loss scale to trace\n",
                 argv[1]);
    return 2;
  }
  dscore::zero::LossScaler scaler = dscore::zero::LossScaler::from_config(loaded.config->fp16);
  std::printf("initial %s\n", dscore::sdk::python_float_repr(scaler.scale()).c_str());
  for (size_t i = 0; i < pattern.size(); ++i) {
    const bool overflow = pattern[i] == '1';
    if (!scaler.update(overflow).ok()) {
      std::printf("error %zu\n", i);
      return 0;
    }
    std::printf("%zu %d %s\n", i, overflow ? 1 : 0,
                dscore::sdk::python_float_repr(scaler.scale()).c_str());
  }
  return 0;
}
