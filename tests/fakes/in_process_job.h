// A job whose ranks are threads of this process: each rank builds its own
// engine (dscore::prepare_text + build_engine) with an explicit JobEnv, all
// share one key-value store, and the "loopback" comm backend connects them.
// What the multirank tests do with mpirun and real processes, in
// milliseconds and without MPI: the in-process layer of the ZeRO stage,
// equivalence and checkpoint tests, and of tests that run several engines
// in one process.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/engine/engine.h"

namespace dscore::testing {

struct InProcessResult {
  std::vector<double> losses;  // rank 0's loss after each optimizer step
  std::vector<float> params;   // the final fp32 parameters, gathered
  std::string error;           // "" when every rank succeeded; else the first rank's error
};

// Hooks every rank runs; a non-OK Status fails the run (and aborts the
// other ranks' collectives).
struct InProcessHooks {
  std::function<void(config::TrainingConfig&)> adjust_config;    // before the engine is built
  std::function<Status(Engine&)> before_training;                // e.g. load a checkpoint
  std::function<Status(Engine&, int64_t step)> after_each_step;  // e.g. save one
  // More plugin folders, and more members of the config's "plugins"
  // section (R"("swapper": {...})"), for fault-injecting plugins.
  std::vector<std::string> plugin_paths;
  std::string plugins_members;
};

// Runs `config_body` (the members of a ds_config object without braces; the
// plugin search path and "comm": {"backend": `comm_backend`} are added) on
// `world` ranks from the engine's global step to the config's train_steps,
// feeding each rank the distributed sampler's micro-batches from the
// config's data source (the model's synthetic task when it has no "data"
// section).
InProcessResult run_in_process_job(const std::string& config_body, int world,
                                   const InProcessHooks& hooks = {},
                                   const std::string& comm_backend = "loopback");

}  // namespace dscore::testing
