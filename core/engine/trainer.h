// `dscore run`: everything between a config file and a trained model. Loads
// and resolves the config, opens the plugin registry, validates every plugin
// section, creates the model/optimizer/scheduler/monitors, builds the engine
// and the data source, and runs `train_steps` optimizer steps with progress
// output. Returns the process exit code: 0 done, 2 config/usage error
// (printed one per line), 1 any other failure (printed with its cause).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscore {

struct RunOptions {
  std::string config_path;
  std::optional<int64_t> steps;  // overrides train_steps
  int ranks = 1;                 // -n: start this many local ranks under mpirun
  bool progress_bar = false;     // redraw one line (stdout is a terminal)
  bool log_json = false;         // --log-format json: JSON log lines and progress records
  // The `run` arguments each rank gets when -n starts them (no -n).
  std::vector<std::string> rank_args;
};

int run_training(const RunOptions& options);

}  // namespace dscore
