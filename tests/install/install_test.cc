// The vendor path (docs/architecture.md#who-uses-dscore, user 3), end to end:
// `cmake --install` this build into a temporary prefix; configure and build the out-of-tree example
// sdk/examples/sgd_momentum against that prefix only (a copy of its folder,
// as a vendor's checkout, so any path back into this source tree is a leak);
// check the plugin exports nothing but dscore_plugin_library_v1; then train
// with it through the INSTALLED dscore and list it with `plugins list`.
// One test, because every step needs the previous one's files.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

// Tools run with a clean view of the machine: nothing from the user's
// environment may point them back at the source or build tree.
ProcessOptions tool_options() {
  ProcessOptions options;
  for (const char* name : {"CMAKE_PREFIX_PATH", "dscore_DIR", "CMAKE_GENERATOR", "CMAKE_BUILD_TYPE",
                           "DSCORE_PLUGIN_PATH", "CFLAGS", "LDFLAGS"})
    options.env[name] = std::nullopt;
  options.timeout = std::chrono::seconds(240);
  return options;
}

ProcessResult run_tool(const std::vector<std::string>& argv) {
  return run_process(argv, tool_options());
}

// "nm -D --defined-only" lines are "<address> <type> <name>".
std::set<std::string> exported_symbols(const fs::path& library) {
  const std::string nm = DSCORE_NM;
  EXPECT_FALSE(nm.empty()) << "CMake found no nm (binutils) for this build";
  if (nm.empty()) return {};
  ProcessResult r = run_tool({nm, "-D", "--defined-only", library.string()});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  std::set<std::string> names;
  for (const std::string& line : split_lines(r.out)) {
    std::istringstream in(line);
    std::string address, type, name;
    if (in >> address >> type >> name) names.insert(name);
  }
  return names;
}

struct CsvRow {
  long long step;
  double value;
};

std::vector<CsvRow> read_loss_csv(const fs::path& file) {
  std::vector<CsvRow> rows;
  std::vector<std::string> lines = split_lines(read_text_file(file));
  EXPECT_FALSE(lines.empty()) << file;
  if (lines.empty()) return rows;
  EXPECT_EQ(lines[0], "step,train_loss");
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t comma = lines[i].find(',');
    if (comma == std::string::npos) continue;
    rows.push_back({std::stoll(lines[i].substr(0, comma)), std::stod(lines[i].substr(comma + 1))});
  }
  return rows;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(Install, VendorPluginBuildsAgainstTheInstalledSdkAndTrainsWithTheInstalledDscore) {
  TempDir root("dscore_install");
  const std::string source_dir = fs::canonical(DSCORE_SOURCE_DIR).string();
  const std::string build_dir = fs::canonical(DSCORE_BUILD_DIR).string();
  // The leak check below looks for these paths: the temp folder must not be under them.
  ASSERT_FALSE(root.path().string().rfind(source_dir, 0) == 0)
      << "set TMPDIR outside the source tree: " << root.path();
  const fs::path prefix = root.path() / "prefix";
  const fs::path plugin_src = root.path() / "sgd_momentum";
  const fs::path plugin_build = root.path() / "example-build";

  // (a) install this build.
  ProcessResult r =
      run_tool({DSCORE_CMAKE_COMMAND, "--install", build_dir, "--prefix", prefix.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const fs::path installed_dscore = prefix / "bin" / "dscore";
  const fs::path installed_plugins = prefix / DSCORE_INSTALLED_PLUGIN_SUBDIR;
  for (const fs::path& p :
       {installed_dscore, installed_plugins / "libdscore_adam.so",
        installed_plugins / "libdscore_mlp.so", prefix / "include/dscore/plugin.h",
        prefix / "include/dscore/optimizer.h",
        prefix / DSCORE_INSTALLED_LIBDIR / "cmake/dscore/dscoreConfig.cmake",
        prefix / DSCORE_INSTALLED_LIBDIR / "cmake/dscore/dscore_plugin.map"})
    EXPECT_TRUE(fs::exists(p)) << p << " not installed";
  ASSERT_TRUE(fs::exists(installed_dscore));

  // (b) the example, copied out of the tree, built against the prefix.
  fs::copy(fs::path(source_dir) / "sdk/examples/sgd_momentum", plugin_src,
           fs::copy_options::recursive);
  std::vector<std::string> configure = {
      DSCORE_CMAKE_COMMAND, "-S", plugin_src.string(), "-B", plugin_build.string(), "-G",
      DSCORE_CMAKE_GENERATOR, "-DCMAKE_C_COMPILER=" + std::string(DSCORE_C_COMPILER),
      "-DCMAKE_PREFIX_PATH=" + prefix.string(), "-DCMAKE_BUILD_TYPE=Release",
      "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
      // The example must be warning-free under its own -Wall -Wextra -Wpedantic.
      "-DCMAKE_C_FLAGS=-Werror",
      // Only CMAKE_PREFIX_PATH may find dscore: no package registries.
      "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF"};
  if (!std::string(DSCORE_CMAKE_MAKE_PROGRAM).empty())
    configure.push_back("-DCMAKE_MAKE_PROGRAM=" + std::string(DSCORE_CMAKE_MAKE_PROGRAM));
  r = run_tool(configure);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run_tool({DSCORE_CMAKE_COMMAND, "--build", plugin_build.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const fs::path plugin = plugin_build / "libsgd_momentum.so";
  ASSERT_TRUE(fs::exists(plugin)) << plugin;

  // It saw only the installed sdk: found through the prefix, compiled with
  // the prefix's headers, and no file of its build names this source or
  // build tree.
  const std::string cache = read_text_file(plugin_build / "CMakeCache.txt");
  const std::string commands = read_text_file(plugin_build / "compile_commands.json");
  const std::string cmake_dir = (prefix / DSCORE_INSTALLED_LIBDIR / "cmake/dscore").string();
  EXPECT_TRUE(contains(cache, "dscore_DIR:PATH=" + cmake_dir + "\n"))
      << "dscore_DIR is not " << cmake_dir;
  EXPECT_TRUE(contains(commands, (prefix / "include").string())) << commands;
  for (const auto& entry : fs::recursive_directory_iterator(plugin_build)) {
    if (!entry.is_regular_file() || entry.path().extension() == ".so" ||
        entry.path().extension() == ".o")
      continue;
    const std::string text = read_text_file(entry.path());
    EXPECT_FALSE(contains(text, source_dir + "/")) << entry.path() << " refers to " << source_dir;
    EXPECT_FALSE(contains(text, build_dir)) << entry.path() << " refers to " << build_dir;
  }

  // (c) the plugin's dynamic symbol table holds the entry symbol and nothing else.
  EXPECT_EQ(exported_symbols(plugin), std::set<std::string>{"dscore_plugin_library_v1"});

  // (d) the INSTALLED dscore trains with it.
  const fs::path config = root.write("ds_config.json", R"({
  "train_batch_size": 32,
  "steps_per_print": 50,
  "optimizer": {"type": "sgd_momentum", "params": {"lr": 0.05, "momentum": 0.9}},
  "csv_monitor": {"enabled": true, "output_path": "runs", "job_name": "sgd"},
  "model": {"type": "mlp", "input_dim": 8, "hidden_dim": 16, "output_dim": 2, "n_hidden_layers": 1},
  "train_steps": 100,
  "seed": 1
})");
  ProcessOptions run_options;
  run_options.env["DSCORE_PLUGIN_PATH"] = plugin_build.string();
  run_options.cwd = root.path();
  r = run_dscore_at(installed_dscore, {"run", "--config", config.string()}, run_options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "done: 100 steps")) << r.out;
  // The installed binary loads the installed built-in plugins, not the build tree's.
  EXPECT_TRUE(contains(r.err, "training model 'mlp' (" +
                                  fs::canonical(installed_plugins / "libdscore_mlp.so").string() +
                                  ")"))
      << r.err;
  std::vector<CsvRow> loss = read_loss_csv(root.path() / "runs/sgd/Train_Samples_train_loss.csv");
  ASSERT_EQ(loss.size(), 100u);
  EXPECT_LT(loss.back().value, 0.5 * loss.front().value)
      << "first " << loss.front().value << ", last " << loss.back().value;

  // (e) `plugins list` of the installed dscore shows it, with its path.
  r = run_dscore_at(installed_dscore, {"plugins", "list"}, run_options);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err, "");
  bool listed = false;
  for (const std::string& line : split_lines(r.out)) {
    std::istringstream in(line);
    std::string kind, name, version, abi, path;
    in >> kind >> name >> version >> abi >> path;
    if (name == "sgd_momentum") {
      listed = true;
      EXPECT_EQ(kind, "optimizer") << line;
      EXPECT_EQ(abi, "1.2") << line;
      EXPECT_EQ(path, fs::canonical(plugin).string()) << line;
    }
    if (name == "adam") {
      EXPECT_EQ(path, fs::canonical(installed_plugins / "libdscore_adam.so").string()) << line;
    }
  }
  EXPECT_TRUE(listed) << r.out;

  // Installed into dscore's own prefix, the plugin is found with no setup at all.
  r = run_tool(
      {DSCORE_CMAKE_COMMAND, "--install", plugin_build.string(), "--prefix", prefix.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run_dscore_at(installed_dscore, {"plugins", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, fs::canonical(installed_plugins / "libsgd_momentum.so").string()))
      << r.out;
}

}  // namespace
}  // namespace dscore::testing
