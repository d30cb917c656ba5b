// `dscore run`: everything between a config file and a trained model. Loads
// and resolves the config, opens the plugin registry, validates every plugin
// section, creates the model/optimizer/scheduler/monitors, builds the engine
// and the data source, optionally resumes from a checkpoint, and runs up to
// `train_steps` optimizer steps with progress output, saving a checkpoint to
// checkpoint_dir every save_interval steps and after the last (a failed
// periodic save is reported and training goes on; a failed final save
// makes the exit code 1). Returns the process exit code: 0 done, 2 config/usage error
// (printed one per line), 1 any other failure (printed with its cause).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/launcher.h"

namespace dscore {

struct RunOptions {
  std::string config_path;
  std::optional<int64_t> steps;    // overrides train_steps
  int ranks = 1;                   // -n: start this many local ranks under mpirun
  std::optional<int> threads;      // --threads: compute threads per rank (InitializeOptions)
  bool progress_bar = false;       // redraw one line (stdout is a terminal)
  bool log_json = false;           // --log-format json: JSON log lines and progress records
  std::string resume_dir;          // --resume: load the newest checkpoint there first
  bool allow_unsupported = false;  // --allow-unsupported (InitializeOptions)
  bool trust_config_plugin_paths = false;  // --trust-config-plugin-paths (InitializeOptions)
  // The `run` arguments each rank gets when -n starts them (no -n).
  std::vector<std::string> rank_args;
  // --hostfile: the ranks are started on these hosts (hosts.args is unused:
  // rank_args are passed).
  std::optional<comm::HostLaunch> hosts;
  bool dry_run = false;  // --dry-run: print the launcher's command instead of running it
};

int run_training(const RunOptions& options);

}  // namespace dscore
