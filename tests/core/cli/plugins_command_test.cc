// `dscore plugins list [--json]` (core/cli/plugins_command.cc) through the
// real executable: every built-in plugin with kind, name, version, ABI and
// absolute path; the JSON form has the same entries; a library on
// DSCORE_PLUGIN_PATH that is not a valid plugin is named on stderr, exit 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <tuple>

#include "core/base/sha256.h"
#include "core/config/json.h"
#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

struct Row {
  std::string kind, name, version, abi, path;
  auto key() const { return std::tie(kind, name, version, abi, path); }
  bool operator<(const Row& o) const { return key() < o.key(); }
  bool operator==(const Row& o) const { return key() == o.key(); }
};

std::ostream& operator<<(std::ostream& os, const Row& r) {
  return os << r.kind << " " << r.name << " " << r.version << " " << r.abi << " " << r.path;
}

// The table's rows (after the header), split on runs of spaces.
std::vector<Row> parse_table(const std::string& out) {
  std::vector<std::string> lines = split_lines(out);
  std::vector<Row> rows;
  EXPECT_FALSE(lines.empty());
  if (lines.empty()) return rows;
  std::istringstream header(lines[0]);
  std::vector<std::string> columns;
  for (std::string c; header >> c;) columns.push_back(c);
  EXPECT_EQ(columns, (std::vector<std::string>{"KIND", "NAME", "VERSION", "ABI", "PATH"}));
  for (size_t i = 1; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    Row r;
    in >> r.kind >> r.name >> r.version >> r.abi >> r.path;
    std::string extra;
    EXPECT_FALSE(in >> extra) << "more than five columns: " << lines[i];
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> parse_json_list(const std::string& out) {
  std::vector<Row> rows;
  auto parsed = json::parse(out, "plugins list --json");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << out;
  if (!parsed.ok()) return rows;
  const json::Value* plugins = parsed->find("plugins");
  EXPECT_TRUE(plugins != nullptr && plugins->is_array()) << out;
  if (plugins == nullptr || !plugins->is_array()) return rows;
  for (const json::Value& p : plugins->items()) {
    const json::Value* library = p.find("library");
    EXPECT_NE(library, nullptr);
    if (library == nullptr) continue;
    rows.push_back({p.find("kind")->as_string(), p.find("name")->as_string(),
                    p.find("version")->as_string(), p.find("abi")->as_string(),
                    library->find("path")->as_string()});
  }
  return rows;
}

const Row* find_row(const std::vector<Row>& rows, const std::string& kind,
                    const std::string& name) {
  for (const Row& r : rows)
    if (r.kind == kind && r.name == name) return &r;
  return nullptr;
}

std::string build_plugin(const std::string& file) {
  return fs::canonical(fs::path(DSCORE_BUILD_PLUGIN_DIR) / file).string();
}

std::string test_plugin_file(const std::string& name) {
  return fs::canonical(fs::path(DSCORE_TEST_PLUGIN_DIR) / name / ("lib" + name + ".so")).string();
}

TEST(CliPluginsList, ShowsEveryBuiltInPluginWithKindNameVersionAbiAndPath) {
  ProcessResult r = run_dscore({"plugins", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err, "");
  std::vector<Row> rows = parse_table(r.out);
  const std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"optimizer", "adam", "libdscore_adam.so"},
      {"optimizer", "adamw", "libdscore_adam.so"},
      {"optimizer", "zerooneadam", "libdscore_zerooneadam.so"},
      {"optimizer", "onebitlamb", "libdscore_onebitlamb.so"},
      {"scheduler", "WarmupLR", "libdscore_lr_schedules.so"},
      {"scheduler", "WarmupDecayLR", "libdscore_lr_schedules.so"},
      {"monitor", "csv_monitor", "libdscore_csv_monitor.so"},
      {"model", "mlp", "libdscore_mlp.so"},
  };
  for (const auto& [kind, name, file] : expected) {
    const Row* row = find_row(rows, kind, name);
    ASSERT_NE(row, nullptr) << kind << " " << name << " missing from\n" << r.out;
    EXPECT_EQ(row->abi, "1.2") << *row;
    EXPECT_FALSE(row->version.empty()) << *row;
    EXPECT_TRUE(fs::path(row->path).is_absolute()) << *row;
    EXPECT_EQ(row->path, build_plugin(file)) << *row;
  }
  // Every library in the build's plugin folder contributes at least one row.
  std::set<std::string> paths;
  for (const Row& row : rows) paths.insert(row.path);
  size_t libraries = 0;
  for (const auto& e : fs::directory_iterator(DSCORE_BUILD_PLUGIN_DIR)) {
    if (e.path().extension() != ".so") continue;
    ++libraries;
    EXPECT_TRUE(paths.count(fs::canonical(e.path()).string())) << e.path() << " not listed";
  }
  EXPECT_GE(libraries, 4u);
}

TEST(CliPluginsList, JsonHasTheSameEntriesAsTheTable) {
  ProcessResult table = run_dscore({"plugins", "list"});
  ProcessResult js = run_dscore({"plugins", "list", "--json"});
  ASSERT_EQ(table.exit_code, 0) << table.describe();
  ASSERT_EQ(js.exit_code, 0) << js.describe();
  EXPECT_EQ(js.err, "");
  std::vector<Row> from_table = parse_table(table.out);
  std::vector<Row> from_json = parse_json_list(js.out);
  std::sort(from_table.begin(), from_table.end());
  std::sort(from_json.begin(), from_json.end());
  EXPECT_FALSE(from_json.empty());
  EXPECT_EQ(from_table, from_json);

  // The JSON form also carries what a tool needs beyond the table.
  auto parsed = json::parse(js.out, "stdout");
  ASSERT_TRUE(parsed.ok());
  for (const json::Value& p : parsed->find("plugins")->items()) {
    ASSERT_NE(p.find("params_schema"), nullptr) << p.find("name")->as_string();
    EXPECT_NE(p.find("library")->find("vendor"), nullptr);
  }
}

TEST(CliPluginsList, PluginOnDscorePluginPathIsListedWithItsPath) {
  ProcessOptions options;
  options.env["DSCORE_PLUGIN_PATH"] = std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_sgd";
  ProcessResult r = run_dscore({"plugins", "list"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<Row> rows = parse_table(r.out);
  const Row* row = find_row(rows, "optimizer", "fake_sgd");
  ASSERT_NE(row, nullptr) << r.out;
  EXPECT_EQ(*row, (Row{"optimizer", "fake_sgd", "1.2.3", "1.2", test_plugin_file("fake_sgd")}));
  EXPECT_NE(find_row(rows, "optimizer", "adam"), nullptr) << "built-ins are still listed";
}

TEST(CliPluginsList, LibraryWithoutTheEntrySymbolIsNamedOnStderrAndExits1) {
  ProcessOptions options;
  options.env["DSCORE_PLUGIN_PATH"] = std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_not_a_plugin";
  ProcessResult r = run_dscore({"plugins", "list"}, options);
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  // The good plugins are still listed.
  EXPECT_NE(find_row(parse_table(r.out), "optimizer", "adam"), nullptr) << r.out;
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0], "warning: " + test_plugin_file("fake_not_a_plugin") +
                          ": not a dscore plugin: no symbol dscore_plugin_library_v1 (a plugin "
                          "must export it; see sdk/examples)");

  // The same problem in the JSON form: stdout stays valid JSON.
  r = run_dscore({"plugins", "list", "--json"}, options);
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_FALSE(parse_json_list(r.out).empty());
  EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
}

// The first 3000 bytes of libdscore_adam.so in a folder on the plugin path
// (an interrupted copy, a full disk) used to kill every command with SIGBUS
// inside the loader; it is one warning naming the file and what is cut off,
// and `dscore run` still trains with the intact built-in adam.
TEST(CliPluginsList, TruncatedLibraryIsNamedAndSkippedNotACrash) {
  TempDir dir("dscore_cli_plugins");
  const std::string full = read_text_file(build_plugin("libdscore_adam.so"));
  ASSERT_GT(full.size(), 3000u);
  const fs::path cut = dir.write("on_path/libdscore_adam.so", full.substr(0, 3000));
  const std::string warning_start = "warning: " + fs::canonical(cut).string() +
                                    ": cannot be loaded: truncated ELF: section headers end at "
                                    "byte ";
  const std::string warning_end =
      " but the file has 3000 bytes; reinstall or rebuild it (an interrupted copy or a full disk "
      "leaves a file like this)";
  ProcessOptions options;
  options.env["DSCORE_PLUGIN_PATH"] = (dir.path() / "on_path").string();

  ProcessResult list = run_dscore({"plugins", "list"}, options);
  EXPECT_EQ(list.signal, 0) << list.describe();
  EXPECT_EQ(list.exit_code, 1) << list.describe();
  EXPECT_NE(find_row(parse_table(list.out), "optimizer", "adam"), nullptr) << list.out;
  std::vector<std::string> lines = split_lines(list.err);
  ASSERT_EQ(lines.size(), 1u) << list.err;
  EXPECT_EQ(lines[0].rfind(warning_start, 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(warning_end), std::string::npos) << lines[0];

  MlpRunConfig cfg;
  cfg.train_steps = 3;
  const fs::path config = dir.write("ds_config.json", cfg.text());
  ProcessResult run = run_dscore({"run", "--config", config.string()}, options);
  EXPECT_EQ(run.signal, 0) << run.describe();
  ASSERT_EQ(run.exit_code, 0) << run.describe();
  EXPECT_EQ(lines_starting_with(run.out, "done: 3 steps").size(), 1u) << run.out;
  lines = lines_starting_with(run.err, "[dscore] " + warning_start);
  ASSERT_EQ(lines.size(), 1u) << run.err;
  EXPECT_NE(lines[0].find(warning_end), std::string::npos) << lines[0];
}

TEST(CliPluginsList, AbiMismatchAndMissingFolderAreEachOneLine) {
  ProcessOptions options;
  options.env["DSCORE_PLUGIN_PATH"] =
      std::string(DSCORE_TEST_PLUGIN_DIR) + "/fake_major2:/nonexistent/dscore/plugins";
  ProcessResult r = run_dscore({"plugins", "list"}, options);
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  std::vector<std::string> lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 2u) << r.err;
  EXPECT_EQ(lines[0], "warning: library 'lib-fake_major2' (" + test_plugin_file("fake_major2") +
                          ") was built against dscore plugin ABI major 2 (2.2), but this dscore "
                          "speaks ABI major 1 (1.2): rebuild the plugin against this dscore's sdk");
  EXPECT_EQ(lines[1],
            "warning: DSCORE_PLUGIN_PATH entry /nonexistent/dscore/plugins does not exist");
  EXPECT_EQ(find_row(parse_table(r.out), "optimizer", "fake_major2"), nullptr);
}

// Every library's SHA-256 in the JSON listing is the file's own.
TEST(CliPlugins, TheJsonListingGivesEachLibrarysSha256) {
  ProcessResult r = run_dscore({"plugins", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto parsed = json::parse(r.out, "plugins list --json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  int checked = 0;
  for (const json::Value& p : parsed->find("plugins")->items()) {
    const json::Value* library = p.find("library");
    const json::Value* digest = library->find("sha256");
    ASSERT_NE(digest, nullptr) << library->find("path")->as_string();
    Result<std::string> expected = sha256_of_file(library->find("path")->as_string());
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(digest->as_string(), *expected) << library->find("path")->as_string();
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace dscore::testing
