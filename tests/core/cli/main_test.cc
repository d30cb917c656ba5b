// The dispatcher (core/cli/main.cc) and each subcommand's --help, through
// the real executable: version text, usage on stdout with exit 0 when asked
// for, on stderr with exit 2 when the command line is wrong.
#include <gtest/gtest.h>

#include <cctype>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

TEST(CliMain, VersionNamesTheReleaseAndThePluginAbi) {
  for (const char* flag : {"--version", "version"}) {
    ProcessResult r = run_dscore({flag});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, std::string("dscore ") + DSCORE_VERSION_TEXT + " (plugin ABI 1.2)\n");
    EXPECT_EQ(r.err, "");
  }
}

TEST(CliMain, HelpListsEveryCommandOnStdout) {
  ProcessResult r = run_dscore({"--help"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* command :
       {"run --config F", "config check F", "config reference", "plugins list"})
    EXPECT_NE(r.out.find(command), std::string::npos) << command << "\n" << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(CliMain, NoArgumentsIsAUsageErrorOnStderr) {
  ProcessResult r = run_dscore({});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("usage: dscore <command>", 0), 0u) << r.err;
}

TEST(CliMain, UnknownCommandIsExit2WithUsageAndASuggestion) {
  ProcessResult r = run_dscore({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.out, "");
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "dscore: unknown command 'frobnicate'");
  EXPECT_NE(r.err.find("usage: dscore <command>"), std::string::npos) << r.err;

  r = run_dscore({"rnu", "--config", "x.json"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(split_lines(r.err)[0], "dscore: unknown command 'rnu'; did you mean \"run\"?");
}

TEST(CliMain, UnknownConfigSubcommandSuggestsTheClosestOne) {
  ProcessResult r = run_dscore({"config", "chek", "ds_config.json"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.out, "");
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "dscore config: unknown subcommand 'chek'; did you mean \"check\"?");
  EXPECT_NE(r.err.find("usage: dscore config check F"), std::string::npos) << r.err;
}

// Each subcommand's --help: the usage line and every option, on stdout, exit 0.
struct HelpCase {
  std::vector<std::string> args;
  std::string usage;
  std::vector<std::string> options;
};

// How GoogleTest shows a case: its command line.
void PrintTo(const HelpCase& c, std::ostream* os) {
  *os << "dscore";
  for (const std::string& a : c.args) *os << ' ' << a;
}

class CliHelp : public ::testing::TestWithParam<HelpCase> {};

TEST_P(CliHelp, PrintsUsageAndOptionsOnStdout) {
  const HelpCase& c = GetParam();
  ProcessResult r = run_dscore(c.args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind(c.usage, 0), 0u) << r.out;
  for (const std::string& option : c.options)
    EXPECT_NE(r.out.find(option), std::string::npos) << option << " missing from\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Commands, CliHelp,
    ::testing::Values(
        HelpCase{{"run", "--help"},
                 "usage: dscore run --config F [--steps N] [-n RANKS]",
                 {"--config", "--steps", "-n", "--allow-unsupported", "--help"}},
        HelpCase{{"run", "-h"}, "usage: dscore run --config F", {"--config"}},
        HelpCase{{"config", "check", "--help"},
                 "usage: dscore config check F [--world-size N]",
                 {"--world-size", "--allow-unsupported", "--help"}},
        HelpCase{{"config", "--help"}, "usage: dscore config check F", {"config reference"}},
        HelpCase{{"plugins", "list", "--help"},
                 "usage: dscore plugins list [--json]",
                 {"--json", "--help"}},
        HelpCase{{"plugins", "--help"}, "usage: dscore plugins list [--json]", {}}),
    // Test names from the arguments: "run_help", "config_check_help", ...
    [](const ::testing::TestParamInfo<HelpCase>& info) {
      std::string name;
      for (const std::string& a : info.param.args) {
        for (char c : a) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
        name += '_';
      }
      while (name.find("__") != std::string::npos) name.replace(name.find("__"), 2, "_");
      return name.substr(name.front() == '_' ? 1 : 0, name.size() - 1);
    });

TEST(CliMain, UnknownOptionIsExit2NamingIt) {
  ProcessResult r = run_dscore({"run", "--config", "x.json", "--stpes", "3"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("--stpes"), std::string::npos) << lines[0];
  EXPECT_NE(r.err.find("usage: dscore run"), std::string::npos) << r.err;
}

TEST(CliMain, PluginsWithoutListIsAUsageError) {
  ProcessResult r = run_dscore({"plugins", "show"});
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_EQ(r.err, "usage: dscore plugins list [--json]\n");
}

}  // namespace
}  // namespace dscore::testing
