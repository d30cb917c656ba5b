#include "core/engine/environment.h"

#include <cstdlib>
#include <string_view>

namespace dscore {
namespace {

std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

EngineEnvironment read_engine_environment() {
  EngineEnvironment e;
  e.experimental_cuda_engine = variable("DSCORE_EXPERIMENTAL_CUDA_ENGINE").value_or("") == "1";
  e.omp_num_threads = variable("OMP_NUM_THREADS");
  e.cpu_streams = variable("DSCORE_CPU_STREAMS");
  e.cpu_device_memory = variable("DSCORE_CPU_DEVICE_MEMORY");
  e.trust_config_plugin_paths = variable("DSCORE_TRUST_CONFIG_PLUGIN_PATHS").value_or("") == "1";
  return e;
}

}  // namespace dscore
