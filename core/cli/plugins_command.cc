// `dscore plugins list [--json]` and the version text.
#include <dscore/plugin.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/base/strings.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/config/json.h"
#include "core/plugin_host/listing.h"
#include "core/plugin_host/registry.h"

namespace dscore::cli {
namespace {

void print_table(const plugin_host::PluginRegistry& registry) {
  std::vector<std::vector<std::string>> rows = {{"KIND", "NAME", "VERSION", "ABI", "PATH"}};
  for (const plugin_host::PluginInfo& p : registry.plugins())
    rows.push_back({plugin_host::kind_name(p.kind), p.name, p.version,
                    std::to_string(p.abi_major) + "." + std::to_string(p.abi_minor),
                    p.library_path});
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

std::string version_text() {
  return std::string("dscore ") + DSCORE_VERSION + " (plugin ABI " +
         std::to_string(DSCORE_ABI_VERSION_MAJOR) + "." + std::to_string(DSCORE_ABI_VERSION_MINOR) +
         ")";
}

int plugins_command(const std::vector<std::string>& args) {
  const char* usage = "usage: dscore plugins list [--json]";
  if (args.empty() || args[0] != "list") {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      std::printf("%s\n", usage);
      return kExitOk;
    }
    std::fprintf(stderr, "%s\n", usage);
    return kExitUsage;
  }
  po::options_description options("plugins list options");
  options.add_options()("json", "print JSON instead of a table");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options({args.begin() + 1, args.end()}, options, positional, usage, &vm, &exit_code))
    return exit_code;
  auto registry = plugin_host::PluginRegistry::open(
      plugin_host::SearchPath::standard({}, std::filesystem::current_path().string()));
  if (!registry.ok()) {
    std::fprintf(stderr, "error: %s\n", registry.status().message().c_str());
    return kExitFailure;
  }
  if (vm.count("json")) {
    std::printf("%s\n", json::serialize(plugin_host::list_json(**registry), true).c_str());
  } else {
    print_table(**registry);
  }
  // The registry's messages already name the library or folder; prefix the
  // path only when one does not, so no line shows the path twice.
  for (const plugin_host::LoadProblem& p : (*registry)->problems()) {
    const bool names_path = p.message.find(p.path) != std::string::npos;
    std::fprintf(stderr, "warning: %s%s%s\n", names_path ? "" : p.path.c_str(),
                 names_path ? "" : ": ", p.message.c_str());
  }
  return (*registry)->problems().empty() ? kExitOk : kExitFailure;
}

}  // namespace dscore::cli
