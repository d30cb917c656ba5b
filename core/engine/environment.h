// The environment variables that shape an engine, read in one place by the
// program (the dscore CLI, a test harness, a trainer that wants them) and
// handed to initialize() in InitializeOptions::environment. The library
// itself reads none of them: an engine built without them gets the
// defaults, and two engines in one process may differ.
#pragma once

#include <optional>
#include <string>

namespace dscore {

struct EngineEnvironment {
  // DSCORE_EXPERIMENTAL_CUDA_ENGINE=1: "device": "cuda" is let through
  // (config/run_rules.h).
  bool experimental_cuda_engine = false;
  // OMP_NUM_THREADS, as written (compute_threads.h).
  std::optional<std::string> omp_num_threads;
  // DSCORE_CPU_STREAMS and DSCORE_CPU_DEVICE_MEMORY, as written (device/select.h).
  std::optional<std::string> cpu_streams;
  std::optional<std::string> cpu_device_memory;
  // DSCORE_TRUST_CONFIG_PLUGIN_PATHS=1: the config's "plugins": {"paths"}
  // may name folders outside its own (plugin_host/trust.h), for every
  // command; `dscore run --trust-config-plugin-paths` says it for one run.
  bool trust_config_plugin_paths = false;
};

// This process's values of the variables above.
EngineEnvironment read_engine_environment();

}  // namespace dscore
