// Shared option parsing for the subcommands (Boost.Program_options lives
// only in core/cli).
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/initialize.h"
#include "core/plugin_host/instances.h"

namespace dscore::cli {

namespace po = boost::program_options;

// Parse `args` against `options` and `positional`. Handles --help (prints
// `usage` + the options, exit 0) and errors (prints them, exit 2). Returns
// true when the command should go on; otherwise *exit_code is set.
bool parse_options(const std::vector<std::string>& args, const po::options_description& options,
                   const po::positional_options_description& positional, const std::string& usage,
                   po::variables_map* vm, int* exit_code);

// prepare(config_path, init) for a command that reads a config: a setup
// failure and every config error are printed ("error: ..."), and nullopt
// comes back (the command then exits kExitUsage).
std::optional<Setup> prepare_or_report(const std::string& config_path,
                                       const InitializeOptions& init);
// The same for a config given as JSON text (`source` names it in errors).
// Relative paths in it resolve against `config_dir`.
std::optional<Setup> prepare_text_or_report(const std::string& json_text, const std::string& source,
                                            const std::string& config_dir,
                                            const InitializeOptions& init);

// The config's LR schedule as the engine builds it: one parameter group
// whose base lr is the optimizer's (*base_lr), and the scheduler over it
// (nullptr without a "scheduler" section). The setup must select an optimizer.
Result<std::unique_ptr<plugin_host::SchedulerInstance>> make_schedule(const Setup& setup,
                                                                      double* base_lr);

// Prints "error: <message>" on stderr; returns kExitFailure.
int report_failure(const Status& status);

// --log-format's value is text or json; otherwise says so on stderr.
bool log_format_ok(const std::string& format);

// "1,2,3" -> {1, 2, 3} appended to *out: token ids in [0, INT32_MAX]; false
// on anything else or an empty list.
bool parse_token_list(const std::string& text, std::vector<int32_t>* out);

}  // namespace dscore::cli
