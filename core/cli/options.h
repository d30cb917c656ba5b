// Shared option parsing for the subcommands (Boost.Program_options lives
// only in core/cli).
#pragma once

#include <boost/program_options.hpp>

#include <string>
#include <vector>

namespace dscore::cli {

namespace po = boost::program_options;

// Parse `args` against `options` and `positional`. Handles --help (prints
// `usage` + the options, exit 0) and errors (prints them, exit 2). Returns
// true when the command should go on; otherwise *exit_code is set.
bool parse_options(const std::vector<std::string>& args, const po::options_description& options,
                   const po::positional_options_description& positional, const std::string& usage,
                   po::variables_map* vm, int* exit_code);

}  // namespace dscore::cli
