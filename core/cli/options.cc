#include "core/cli/options.h"

#include <iostream>

#include "core/cli/commands.h"

namespace dscore::cli {

bool parse_options(const std::vector<std::string>& args, const po::options_description& options,
                   const po::positional_options_description& positional, const std::string& usage,
                   po::variables_map* vm, int* exit_code) {
  po::options_description all = options;
  all.add_options()("help,h", "show this help");
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), *vm);
    if (vm->count("help")) {
      std::cout << usage << "\n" << all << "\n";
      *exit_code = kExitOk;
      return false;
    }
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << "dscore: " << e.what() << "\n\n" << usage << "\n" << all << "\n";
    *exit_code = kExitUsage;
    return false;
  }
  return true;
}

}  // namespace dscore::cli
