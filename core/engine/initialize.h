// DeepSpeed's deepspeed.initialize() for C++ programs: a config file (or
// text) and optionally a C++ model in, a ready Engine out. Steps, usable
// separately by tools that want to stop early (`dscore config check`):
//   prepare()      parse + validate the config, open the plugin registry,
//                  find and validate every plugin section;
//   build_engine() create the plugin instances and the engine.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/base/status.h"
#include "core/comm/job_env.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/engine/environment.h"
#include "core/engine/plugin_setup.h"
#include "core/plugin_host/host_context.h"
#include "core/plugin_host/registry.h"

namespace dscore {

struct InitializeOptions {
  // Who this process is; by default from the launcher's environment
  // (mpirun, srun, torchrun variables; one rank without a launcher).
  std::optional<comm::JobEnv> job;
  std::optional<int64_t> train_steps;  // overrides "train_steps"
  // True when the caller brings its own Model: the config's "model" section
  // is then optional and ignored.
  bool own_model = false;
  // The job's key-value store, shared by every rank that lives in this
  // process (ranks as threads, e.g. the loopback comm backend); nullptr:
  // the job's TCP store at MASTER_ADDR:MASTER_PORT when the job has several
  // ranks (core/comm/job_store.h), else a store of this engine's own.
  std::shared_ptr<plugin_host::KvBackend> kv_store;
  // Keys of DeepSpeed features dscore does not implement become warnings
  // (notices starting "warning: ") instead of errors, and training runs
  // without them: `dscore run --allow-unsupported` (config::ErrorKind).
  bool allow_unsupported = false;
  // The config's "plugins": {"paths": [...]} may name folders outside the
  // config file's own folder (plugin_host/trust.h): the program trusts where
  // its config came from. Also set by environment.trust_config_plugin_paths.
  bool trust_config_plugin_paths = false;
  // Threads this rank computes with (compute_threads.h): unset, the budget
  // (OMP_NUM_THREADS, else this node's CPUs shared by its ranks); 0, leave
  // TBB's pool as the process has it (a trainer that manages its threads).
  std::optional<int> compute_threads;
  // The environment variables that shape the engine, as the program read
  // them (read_engine_environment()); empty: none set.
  EngineEnvironment environment;
};

// Options carrying this process's environment (read_engine_environment()):
// what a program that honours DSCORE_* and OMP_NUM_THREADS starts from.
InitializeOptions options_with_environment();

struct Setup {
  InitializeOptions options;
  comm::JobEnv job;
  config::LoadedConfig loaded;  // errors here are config errors (print, exit 2)
  std::shared_ptr<plugin_host::PluginRegistry> registry;
  PluginSelection selection;
};

// Config problems (including unknown plugins and bad plugin params) end up
// in setup.loaded.errors; a Status error means the launcher environment is
// malformed or the plugin search path itself could not be opened (an
// explicitly named library that is broken).
Result<Setup> prepare(const std::string& config_path, const InitializeOptions& options);
Result<Setup> prepare_text(std::string_view config_json, std::string_view source_name,
                           const std::string& config_dir, const InitializeOptions& options);

// Requires setup.loaded.ok(). Collective: creates the communicator (comm
// backend) and the engine on every rank. `model` replaces the config's
// model plugin.
Result<std::unique_ptr<Engine>> build_engine(const Setup& setup, std::unique_ptr<Model> model);

// prepare + build_engine; config errors become one INVALID_ARGUMENT status
// with one formatted error per line.
Result<std::unique_ptr<Engine>> initialize(const std::string& config_path,
                                           std::unique_ptr<Model> model = nullptr,
                                           InitializeOptions options = {});

// "<file>:<line>:<col>: <path>: <message>" lines of every config error.
// Logs the loader's notices: those starting "warning: " (an unsupported
// feature allowed by allow_unsupported) as warnings, the rest as info.
void log_config_notices(const config::LoadedConfig& loaded);

std::string format_config_errors(const config::LoadedConfig& loaded);

}  // namespace dscore
